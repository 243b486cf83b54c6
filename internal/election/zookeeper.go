package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// ZooKeeperOptions configure a ZooKeeper elector.
type ZooKeeperOptions struct {
	// Servers are the ensemble's host:port addresses.
	Servers []string
	// SessionTimeout is asked of the server, which clamps it to between 2
	// and 20 of its ticks. A leader that cannot reach ZooKeeper steps down
	// after two thirds of it; the server hands leadership on after all of
	// it (docs/ha.md).
	SessionTimeout time.Duration
	// Root holds one directory per election; DefaultZooKeeperRoot when empty.
	Root string
	// Name of the election: replicas with the same Root and Name compete.
	Name string
	// Identity is this replica's host:port, stored as its candidacy's data.
	Identity string
	Logger   *slog.Logger
}

// DefaultZooKeeperRoot is where elections live unless configured.
const DefaultZooKeeperRoot = "/gpumeter/election"

// candidatePrefix names the candidacy znodes; ZooKeeper appends a
// ten-digit sequence number that orders them.
const candidatePrefix = "n_"

// ZooKeeper runs the standard election recipe: each candidate creates an
// ephemeral sequential znode under Root/Name holding its identity; the
// lowest sequence leads; every other candidate watches only the one just
// below it (no herd when the leader goes). The leader's term ends as soon
// as its client loses the connection (suspended) or the session expires,
// and its fencing token is the candidacy znode's creation zxid.
type ZooKeeper struct {
	conn     *zk.Conn
	dir      string
	identity string
	log      *slog.Logger

	mu          sync.Mutex
	node        string        // our candidacy's full path; "" when none
	generation  int           // bumped by Resign: a create finishing later is withdrawn
	term        *Term         // the running term, if any
	lost        chan struct{} // closed when the connection or session is lost, then replaced
	campaigning bool
	closed      bool
}

var _ Elector = (*ZooKeeper)(nil)

// NewZooKeeper connects to the ensemble (in the background: the client
// keeps reconnecting) and returns an elector that is not yet a candidate.
func NewZooKeeper(opts ZooKeeperOptions) (*ZooKeeper, error) {
	if len(opts.Servers) == 0 {
		return nil, errors.New("election: zookeeper: no servers")
	}
	if opts.SessionTimeout <= 0 {
		return nil, fmt.Errorf("election: zookeeper: session timeout %s: must be positive", opts.SessionTimeout)
	}
	if err := validateName(opts.Name); err != nil {
		return nil, fmt.Errorf("election: zookeeper: %w", err)
	}
	if err := ValidateIdentity(opts.Identity); err != nil {
		return nil, fmt.Errorf("election: zookeeper: %w", err)
	}
	root := opts.Root
	if root == "" {
		root = DefaultZooKeeperRoot
	}
	if !strings.HasPrefix(root, "/") || strings.HasSuffix(root, "/") {
		return nil, fmt.Errorf("election: zookeeper: root %q: want an absolute path without a trailing slash", root)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	z := &ZooKeeper{
		dir:      root + "/" + opts.Name,
		identity: opts.Identity,
		log:      log.With("election", opts.Name, "identity", opts.Identity),
		lost:     make(chan struct{}),
	}
	conn, _, err := zk.Connect(opts.Servers, opts.SessionTimeout,
		zk.WithLogger(zkLogger{z.log}), zk.WithLogInfo(false), zk.WithEventCallback(z.onEvent))
	if err != nil {
		return nil, fmt.Errorf("election: zookeeper %v: %w", opts.Servers, err)
	}
	z.conn = conn
	return z, nil
}

// onEvent runs on the client's own goroutine for every event, so that no
// session change is dropped (the event channel drops when full).
func (z *ZooKeeper) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	switch ev.State {
	case zk.StateDisconnected, zk.StateExpired:
	default:
		return
	}
	z.mu.Lock()
	close(z.lost)
	z.lost = make(chan struct{})
	if ev.State == zk.StateExpired {
		// The server has deleted the session's ephemeral candidacy.
		z.node = ""
	}
	term := z.term
	z.term = nil
	z.mu.Unlock()
	if term != nil {
		// Disconnected is ZooKeeper's "suspended": the session may still
		// live, but nothing proves it any more, so the leader stops now;
		// the server expires the session only later (docs/ha.md).
		term.end(fmt.Errorf("%w: zookeeper session %s", ErrLeadershipLost, ev.State))
		z.log.Warn("election: leadership lost", "reason", ev.State.String())
	}
}

// Campaign implements Elector.
func (z *ZooKeeper) Campaign(ctx context.Context) (*Term, error) {
	z.mu.Lock()
	switch {
	case z.closed:
		z.mu.Unlock()
		return nil, errors.New("election: zookeeper: closed")
	case z.campaigning:
		z.mu.Unlock()
		return nil, errors.New("election: zookeeper: a campaign is already running")
	case z.term != nil && z.term.Held():
		z.mu.Unlock()
		return nil, errors.New("election: zookeeper: already leading")
	}
	z.campaigning = true
	z.mu.Unlock()
	defer func() {
		z.mu.Lock()
		z.campaigning = false
		z.mu.Unlock()
	}()

	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		term, wait, err := z.tryLead(ctx)
		if term != nil {
			z.log.Info("election: leading", "token", term.Token)
			return term, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			z.log.Debug("election: campaign step failed; retrying", "err", err)
			wait = time.After(100 * time.Millisecond)
		}
		if wait == nil {
			continue // nothing to wait for: look again at once
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wait:
		}
	}
}

// tryLead makes sure this replica is a candidate, then either starts a
// term (its znode is the lowest) or returns what to wait for before the
// next look (its predecessor going, or the connection being lost); a nil
// channel means look again at once.
func (z *ZooKeeper) tryLead(ctx context.Context) (*Term, <-chan time.Time, error) {
	z.mu.Lock()
	lost := z.lost
	z.mu.Unlock()

	node, err := z.ensureCandidacy(ctx)
	if err != nil {
		return nil, nil, err
	}
	children, err := do(ctx, func() ([]string, error) {
		c, _, err := z.conn.Children(z.dir)
		return c, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("election: zookeeper: list %s: %w", z.dir, err)
	}
	children = candidates(children)
	me := slices.Index(children, path.Base(node))
	if me < 0 {
		// Our znode is gone (the session expired, or someone removed it):
		// stand again.
		z.forgetCandidacy(node)
		return nil, nil, errors.New("election: zookeeper: candidacy znode vanished")
	}
	if me == 0 {
		return z.startTerm(ctx, node, lost)
	}
	predecessor := z.dir + "/" + children[me-1]
	type watch struct {
		exists bool
		ch     <-chan zk.Event
	}
	w, err := do(ctx, func() (watch, error) {
		ok, _, ch, err := z.conn.ExistsW(predecessor)
		return watch{ok, ch}, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("election: zookeeper: watch %s: %w", predecessor, err)
	}
	if !w.exists {
		return nil, nil, nil // gone between the list and the watch: look again
	}
	next := make(chan time.Time, 1)
	go func() {
		select {
		case <-w.ch:
		case <-lost:
		case <-ctx.Done():
		}
		next <- time.Now()
	}()
	return nil, next, nil
}

// startTerm begins a term on the lowest candidacy, unless the connection
// was lost since the look began, and ends it if the znode is removed.
func (z *ZooKeeper) startTerm(ctx context.Context, node string, lost chan struct{}) (*Term, <-chan time.Time, error) {
	type watch struct {
		stat *zk.Stat
		ch   <-chan zk.Event
	}
	w, err := do(ctx, func() (watch, error) {
		ok, stat, ch, err := z.conn.ExistsW(node)
		if err == nil && !ok {
			err = zk.ErrNoNode
		}
		return watch{stat, ch}, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("election: zookeeper: watch own candidacy %s: %w", node, err)
	}
	z.mu.Lock()
	select {
	case <-lost:
		z.mu.Unlock()
		return nil, nil, errors.New("election: zookeeper: connection lost while taking the lead")
	default:
	}
	if z.node != node || z.closed {
		z.mu.Unlock()
		return nil, nil, errors.New("election: zookeeper: candidacy withdrawn while taking the lead")
	}
	term := newTerm(Leader{Identity: z.identity, Token: w.stat.Czxid})
	z.term = term
	z.mu.Unlock()
	go func() {
		select {
		case ev := <-w.ch:
			// Any change to our own znode (deleted by an operator, or the
			// watch dropped with the session) ends the term.
			z.mu.Lock()
			if z.term == term {
				z.term = nil
			}
			z.mu.Unlock()
			term.end(fmt.Errorf("%w: candidacy znode %s: %s", ErrLeadershipLost, node, ev.Type))
		case <-term.Done():
		}
	}()
	return term, nil, nil
}

// ensureCandidacy returns our candidacy znode, creating it (and the
// election's directory) when there is none.
func (z *ZooKeeper) ensureCandidacy(ctx context.Context) (string, error) {
	z.mu.Lock()
	node, generation := z.node, z.generation
	z.mu.Unlock()
	if node != "" {
		return node, nil
	}
	return do(ctx, func() (string, error) {
		if err := z.ensureDir(); err != nil {
			return "", err
		}
		created, err := z.conn.CreateProtectedEphemeralSequential(z.dir+"/"+candidatePrefix, []byte(z.identity), zk.WorldACL(zk.PermAll))
		if err != nil {
			return "", fmt.Errorf("election: zookeeper: create candidacy under %s: %w", z.dir, err)
		}
		// Recorded here, not by the caller: a campaign whose ctx ended
		// mid-create must not leave a candidacy nobody knows about.
		z.mu.Lock()
		defer z.mu.Unlock()
		if z.generation != generation || z.closed || z.node != "" {
			go func() { _ = z.conn.Delete(created, -1) }()
			return "", errors.New("election: zookeeper: candidacy withdrawn while being created")
		}
		z.node = created
		return created, nil
	})
}

// ensureDir creates Root/Name and its parents (persistent, empty).
func (z *ZooKeeper) ensureDir() error {
	at := ""
	for _, part := range strings.Split(strings.TrimPrefix(z.dir, "/"), "/") {
		at += "/" + part
		_, err := z.conn.Create(at, nil, 0, zk.WorldACL(zk.PermAll))
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("election: zookeeper: create %s: %w", at, err)
		}
	}
	return nil
}

func (z *ZooKeeper) forgetCandidacy(node string) {
	z.mu.Lock()
	if z.node == node {
		z.node = ""
	}
	z.mu.Unlock()
}

// Leader implements Elector: the identity stored in the lowest candidacy.
func (z *ZooKeeper) Leader(ctx context.Context) (Leader, error) {
	// The lowest may go between the list and the read: look again.
	for attempt := 0; attempt < 3; attempt++ {
		children, err := do(ctx, func() ([]string, error) {
			c, _, err := z.conn.Children(z.dir)
			return c, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			return Leader{}, ErrNoLeader
		}
		if err != nil {
			return Leader{}, fmt.Errorf("election: zookeeper: list %s: %w", z.dir, err)
		}
		children = candidates(children)
		if len(children) == 0 {
			return Leader{}, ErrNoLeader
		}
		type got struct {
			data []byte
			stat *zk.Stat
		}
		g, err := do(ctx, func() (got, error) {
			data, stat, err := z.conn.Get(z.dir + "/" + children[0])
			return got{data, stat}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return Leader{}, fmt.Errorf("election: zookeeper: read leader %s: %w", children[0], err)
		}
		return Leader{Identity: string(g.data), Token: g.stat.Czxid}, nil
	}
	return Leader{}, ErrNoLeader
}

// Resign implements Elector: the term ends before the candidacy is
// deleted, so the next leader never overlaps this one.
func (z *ZooKeeper) Resign(ctx context.Context) error {
	z.mu.Lock()
	term, node := z.term, z.node
	z.term, z.node = nil, ""
	z.generation++
	z.mu.Unlock()
	if term != nil {
		term.end(ErrResigned)
		z.log.Info("election: resigned", "token", term.Token)
	}
	if node == "" {
		return nil
	}
	_, err := do(ctx, func() (struct{}, error) {
		err := z.conn.Delete(node, -1)
		if errors.Is(err, zk.ErrNoNode) {
			err = nil
		}
		return struct{}{}, err
	})
	if err != nil {
		return fmt.Errorf("election: zookeeper: delete candidacy %s: %w", node, err)
	}
	return nil
}

// Close implements Elector: the term ends, then the session closes, which
// deletes the candidacy on the server at once.
func (z *ZooKeeper) Close() error {
	z.mu.Lock()
	if z.closed {
		z.mu.Unlock()
		return nil
	}
	z.closed = true
	term := z.term
	z.term, z.node = nil, ""
	z.mu.Unlock()
	if term != nil {
		term.end(ErrResigned)
	}
	z.conn.Close()
	return nil
}

// candidates keeps our candidacy znodes, ordered by sequence number.
func candidates(children []string) []string {
	var out []string
	for _, c := range children {
		if _, ok := sequence(c); ok {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		sa, _ := sequence(a)
		sb, _ := sequence(b)
		return int(sa - sb)
	})
	return out
}

// sequence is the number ZooKeeper appended to a candidacy's name (a
// protected name starts with a GUID, so only the suffix orders).
func sequence(name string) (int64, bool) {
	i := strings.LastIndex(name, candidatePrefix)
	if i < 0 || len(name)-i-len(candidatePrefix) != 10 {
		return 0, false
	}
	n, err := strconv.ParseInt(name[i+len(candidatePrefix):], 10, 64)
	return n, err == nil
}

// do runs a ZooKeeper call, which waits on the client's reconnects
// without a deadline, and gives up on it when ctx ends.
func do[T any](ctx context.Context, op func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := op()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

func validateName(name string) error {
	if name == "" {
		return errors.New("election name: required")
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.'
		if !ok {
			return fmt.Errorf("election name %q: use lower-case letters, digits, '-' and '.' (a Kubernetes object name)", name)
		}
	}
	if len(name) > 253 || strings.HasPrefix(name, "-") || strings.HasPrefix(name, ".") {
		return fmt.Errorf("election name %q: at most 253 characters, starting with a letter or digit", name)
	}
	return nil
}

// zkLogger sends the client's own messages to slog at debug: reconnects
// are routine, and what matters reaches the elector as session events.
type zkLogger struct{ log *slog.Logger }

func (l zkLogger) Printf(format string, args ...any) {
	l.log.Debug("zookeeper client: " + fmt.Sprintf(format, args...))
}
