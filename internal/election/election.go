// Package election chooses one leader among gpumeter's server replicas
// through an existing coordination engine: ZooKeeper (or ClickHouse
// Keeper, which speaks its protocol) or the Kubernetes Lease API. It never
// decides anything itself; it only reports what the engine decided.
//
// docs/ha.md describes the design and the guarantees during a failover.
package election

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
)

// Elector campaigns for the leadership of one named election on behalf of
// one replica, known to the others by its identity (the host:port they
// forward to).
type Elector interface {
	// Campaign blocks until this replica leads, then returns the Term; it
	// returns ctx's error when ctx ends first. After a Term ends the
	// replica may campaign again. Only one Campaign runs at a time.
	Campaign(ctx context.Context) (*Term, error)
	// Leader is the current leader as the engine sees it now (possibly
	// this replica), or ErrNoLeader while there is none. It waits on the
	// engine: give ctx a deadline.
	Leader(ctx context.Context) (Leader, error)
	// Resign ends this replica's Term, if any, and withdraws its
	// candidacy so that another replica can lead at once. A Campaign
	// still running stands again: cancel its context first.
	Resign(ctx context.Context) error
	// Close resigns and releases the connection to the engine.
	Close() error
}

// Leader identifies the replica that leads.
type Leader struct {
	// Identity is the leader's host:port, the address to forward to.
	Identity string
	// Token is the fencing token of the leader's term: it grows whenever
	// another replica takes over, so a durable record that keeps the
	// highest token it has seen can refuse an older leader's writes.
	Token int64
}

// ErrNoLeader: nobody leads right now (an election is under way).
var ErrNoLeader = errors.New("election: no leader")

// ErrLeadershipLost is the cause of a Term's context when the engine no
// longer backs this replica's leadership (session lost or suspended,
// lease not renewed, candidacy removed).
var ErrLeadershipLost = errors.New("election: leadership lost")

// ErrResigned is the cause of a Term's context after Resign or Close.
var ErrResigned = errors.New("election: resigned")

// Term is one stretch of leadership. The replica may act as leader only
// while Context() is not done; context.Cause says why it ended.
type Term struct {
	Leader
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newTerm(l Leader) *Term {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Term{Leader: l, ctx: ctx, cancel: cancel}
}

// Context is cancelled when the term ends.
func (t *Term) Context() context.Context { return t.ctx }

// Done is closed when the term ends.
func (t *Term) Done() <-chan struct{} { return t.ctx.Done() }

// Held reports whether the term is still running.
func (t *Term) Held() bool { return t.ctx.Err() == nil }

// end ends the term with cause; a second call keeps the first cause.
func (t *Term) end(cause error) { t.cancel(cause) }

// ValidateIdentity checks that identity is a host:port other replicas can
// dial: a non-empty host and a port in 1–65535.
func ValidateIdentity(identity string) error {
	host, port, err := net.SplitHostPort(identity)
	if err != nil {
		return fmt.Errorf("identity %q: want host:port: %w", identity, err)
	}
	if host == "" {
		return fmt.Errorf("identity %q: the host is empty", identity)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("identity %q: port %q is not 1-65535", identity, port)
	}
	return nil
}

// NewTerm starts a term for an Elector built outside this package (a
// test's); end ends it with cause.
func NewTerm(l Leader) (term *Term, end func(cause error)) {
	t := newTerm(l)
	return t, t.end
}
