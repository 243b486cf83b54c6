package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"
)

// slack is what the failover bounds allow beyond the documented figure: the
// tests run beside others on a loaded 2-core machine, where timers and the
// ZooKeeper JVM run late. The figures measured are logged.
const slack = 2 * time.Second

// ledger records every term any candidate of one election gains and
// checks, at the moment a term begins, that every earlier term has already
// ended and that the fencing token grew if the leader changed: two leaders
// at once, or a token that does not fence the previous leader, is a
// violation.
type ledger struct {
	mu         sync.Mutex
	terms      []*Term
	holders    []string
	violations []string
	gained     chan gain
}

type gain struct {
	identity string
	term     *Term
	at       time.Time
}

func newLedger() *ledger { return &ledger{gained: make(chan gain, 256)} }

func (l *ledger) record(identity string, term *Term) {
	now := time.Now()
	l.mu.Lock()
	for i, old := range l.terms {
		if old.Held() {
			l.violations = append(l.violations, fmt.Sprintf("%s gained token %d while %s still held token %d",
				identity, term.Token, l.holders[i], old.Token))
		}
	}
	// A replica that leads again with nobody between keeps its token (a
	// ZooKeeper connection back within the session, a Lease re-taken by
	// its holder); any other successor must hold a higher one.
	if n := len(l.terms); n > 0 {
		prev := l.terms[n-1].Token
		if term.Token < prev || term.Token == prev && l.holders[n-1] != identity {
			l.violations = append(l.violations, fmt.Sprintf("%s gained token %d after %s's %d: not above it",
				identity, term.Token, l.holders[n-1], prev))
		}
	}
	if term.Identity != identity {
		l.violations = append(l.violations, fmt.Sprintf("the term of %s names %q", identity, term.Identity))
	}
	l.terms = append(l.terms, term)
	l.holders = append(l.holders, identity)
	l.mu.Unlock()
	l.gained <- gain{identity: identity, term: term, at: now}
}

// count is how many terms have begun.
func (l *ledger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.terms)
}

// check fails the test on any violation so far.
func (l *ledger) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range l.violations {
		t.Errorf("election violated: %s", v)
	}
}

// held counts the terms running now.
func (l *ledger) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, term := range l.terms {
		if term.Held() {
			n++
		}
	}
	return n
}

// next waits for the next term to begin.
func (l *ledger) next(t *testing.T, within time.Duration) gain {
	t.Helper()
	select {
	case g := <-l.gained:
		return g
	case <-time.After(within):
		t.Fatalf("no leader within %s (%d terms so far)", within, len(l.terms))
		return gain{}
	}
}

// expectNone fails when a term begins within the window.
func (l *ledger) expectNone(t *testing.T, window time.Duration) {
	t.Helper()
	select {
	case g := <-l.gained:
		t.Fatalf("%s also became leader (token %d)", g.identity, g.term.Token)
	case <-time.After(window):
	}
}

// campaignLoop keeps e campaigning, as a server replica would: lead until
// the term ends, then stand again, until ctx ends.
func campaignLoop(ctx context.Context, e Elector, identity string, l *ledger) {
	go func() {
		for ctx.Err() == nil {
			term, err := e.Campaign(ctx)
			if err != nil {
				select {
				case <-ctx.Done():
					return
				case <-time.After(50 * time.Millisecond):
				}
				continue
			}
			l.record(identity, term)
			n := l.count()
			select {
			case <-term.Done():
			case <-ctx.Done():
				return
			}
			// A replica resigns when it shuts down: it stays out until
			// another replica has led (or, with nobody else standing, a
			// few seconds), so that the handover goes to another replica
			// however late the others stand again on a loaded machine.
			if errors.Is(context.Cause(term.Context()), ErrResigned) {
				out := time.Now().Add(3 * time.Second)
				for l.count() == n && time.Now().Before(out) {
					select {
					case <-time.After(20 * time.Millisecond):
					case <-ctx.Done():
						return
					}
				}
			}
		}
	}()
}

// testLogger shows warnings on stderr; it never uses t.Log, which panics
// when the client's goroutines log after the test has returned.
func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: testLogLevel}))
}

var testLogLevel = func() slog.Level {
	if os.Getenv("ELECTION_TEST_DEBUG") != "" {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}()

// The ledger's checks themselves: an overlap and a token that does not
// grow are caught, a clean handover and a same-holder reclaim are not.
func TestLedgerCatchesOverlapAndStaleTokens(t *testing.T) {
	l := newLedger()
	a := newTerm(Leader{Identity: "a:1", Token: 5})
	l.record("a:1", a)
	a.end(ErrResigned)
	l.record("a:1", newTerm(Leader{Identity: "a:1", Token: 5})) // reclaimed, nobody between
	if len(l.violations) != 0 {
		t.Fatalf("clean history flagged: %v", l.violations)
	}
	l.record("b:1", newTerm(Leader{Identity: "b:1", Token: 5})) // a's second term still held, same token
	if len(l.violations) != 2 {
		t.Fatalf("overlap with a stale token: %d violations %v, want 2", len(l.violations), l.violations)
	}
}
