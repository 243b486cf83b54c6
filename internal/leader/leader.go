// Package leader runs a server replica's leader-only work (the scheduled
// jobs, webhook delivery, quota crossings, admission decisions) while the
// election backs it, and stops that work the moment the term ends
// (docs/ha.md).
package leader

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/election"
	"github.com/gpumeter/gpumeter/internal/jobs"
)

// Gate says whether this replica leads now, and hands out contexts that
// end with the current term.
type Gate struct {
	mu      sync.Mutex
	term    context.Context // nil while not leading
	token   int64
	changed chan struct{} // closed and replaced at every change
}

// NewGate starts closed: not leading until Campaign opens it.
func NewGate() *Gate { return &Gate{changed: make(chan struct{})} }

// Solo is a single replica's gate: it leads from the start, for good.
func Solo() *Gate {
	g := NewGate()
	g.set(context.Background(), 0)
	return g
}

func (g *Gate) set(term context.Context, token int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.term, g.token = term, token
	close(g.changed)
	g.changed = make(chan struct{})
}

// current is the running term's context (nil when none) and a channel
// closed at the next change.
func (g *Gate) current() (context.Context, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.term != nil && g.term.Err() != nil {
		return nil, g.changed // ended, the campaign loop has not seen it yet
	}
	return g.term, g.changed
}

// Leading reports whether this replica leads now.
func (g *Gate) Leading() bool {
	term, _ := g.current()
	return term != nil
}

// Within derives from parent a context that also ends when the current
// term ends; ok is false (and nothing is derived) while not leading.
func (g *Gate) Within(parent context.Context) (ctx context.Context, cancel context.CancelFunc, ok bool) {
	term, _ := g.current()
	if term == nil {
		return nil, nil, false
	}
	ctx, cancel = within(parent, term)
	return ctx, cancel, true
}

func within(parent, term context.Context) (context.Context, context.CancelFunc) {
	ctx, cancelCause := context.WithCancelCause(parent)
	stop := context.AfterFunc(term, func() { cancelCause(context.Cause(term)) })
	return ctx, func() { stop(); cancelCause(context.Canceled) }
}

// WhileLeading runs fn during every term until ctx ends: fn's context
// ends with the term (or ctx), and fn runs again at the next term.
func (g *Gate) WhileLeading(ctx context.Context, fn func(context.Context)) {
	for {
		// The term and the change channel of one moment: a term that
		// begins after this closes changed, so none is missed.
		term, changed := g.current()
		if term != nil {
			run, cancel := within(ctx, term)
			fn(run)
			cancel()
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// retryAfter is the pause after a failed campaign (the engine out of
// reach) before standing again.
const retryAfter = time.Second

// startTimeout bounds a term's start-up (the rebuild of admitted work):
// past it the replica leads without it rather than leave admissions
// unanswered (docs/ha.md).
const startTimeout = 5 * time.Second

// Campaign stands in e until ctx ends, opening g for each term and
// closing it when the term ends. start, when not nil, runs at the
// beginning of each term before g opens (a failure is logged and the
// term goes on). On return g is closed, then stop runs (when not nil:
// the last admission records are written before a successor reads
// them), then e is closed, which resigns, so that another replica takes
// over at once.
func Campaign(ctx context.Context, e election.Elector, g *Gate, start func(context.Context) error, stop func(context.Context), log *slog.Logger) {
	defer func() {
		g.set(nil, 0)
		if stop != nil {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
			stop(sctx)
			cancel()
		}
		if err := e.Close(); err != nil {
			log.Warn("election: close", "err", err)
		}
	}()
	for ctx.Err() == nil {
		term, err := e.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("election: campaign failed; standing again", "err", err, "retry_in", retryAfter)
			select {
			case <-ctx.Done():
				return
			case <-time.After(retryAfter):
			}
			continue
		}
		log.Info("election: this replica leads", "token", term.Token)
		if start != nil {
			sctx, cancel := within(ctx, term.Context())
			sctx, cancelTimeout := context.WithTimeout(sctx, startTimeout)
			if err := start(sctx); err != nil {
				log.Error("election: term start-up failed; leading without it", "err", err)
			}
			cancelTimeout()
			cancel()
		}
		g.set(term.Context(), term.Token)
		select {
		case <-term.Done():
			g.set(nil, 0)
			log.Warn("election: term ended; leader-only work stopped", "cause", context.Cause(term.Context()))
		case <-ctx.Done():
			return // the deferred Close resigns
		}
	}
}

// ErrNotLeading: this replica does not lead now.
var ErrNotLeading = errors.New("leader: this replica does not lead")

// Job wraps a scheduled job so that it runs only while g is open, its
// context ending with the term; a follower's turn is jobs.ErrSkipped,
// not a run. Each run is logged at its start and end with the term's
// token: the record of which replica ran which turn, which outlives a
// killed process (its log) where the run counters do not (docs/ha.md).
func (g *Gate) Job(name string, log *slog.Logger, run func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		g.mu.Lock()
		term, token := g.term, g.token
		g.mu.Unlock()
		if term == nil || term.Err() != nil {
			return jobs.ErrSkipped
		}
		ctx, cancel := within(ctx, term)
		defer cancel()
		started := time.Now()
		log.Info("leader job started", "job", name, "token", token, "started", started.UTC().Format(time.RFC3339Nano))
		err := run(ctx)
		log.Info("leader job done", "job", name, "token", token, "started", started.UTC().Format(time.RFC3339Nano),
			"took", time.Since(started).Round(time.Millisecond), "err", err)
		return err
	}
}
