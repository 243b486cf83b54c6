package quota

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/credits"
)

// Admitted is one part of an admission the leader holds: what a new
// leader rebuilds (docs/ha.md).
type Admitted struct {
	ID         string // the admission's id; its parts share it
	Part       int    // the part's index within the admission
	Tenant     string
	Department string
	GPUModel   string
	Demand     Demand
	Expires    time.Time
	Released   bool // its work showed up in the measured usage
}

// AdmissionLog keeps the admissions the leader holds durably, so that a
// new leader starts from them instead of from zero (internal/store meets
// it with the quota_admissions table).
type AdmissionLog interface {
	// SaveAdmissions writes admissions (again, with Released, when their
	// work showed up).
	SaveAdmissions(ctx context.Context, as []Admitted) error
	// HeldAdmissions lists those neither released nor expired at now.
	HeldAdmissions(ctx context.Context, now time.Time) ([]Admitted, error)
	// SaveCreditHolds writes what credit_only admissions hold of their
	// customers' balances.
	SaveCreditHolds(ctx context.Context, hs []CreditHold) error
	// CreditHolds lists the holds whose Until is after since.
	CreditHolds(ctx context.Context, since time.Time) ([]CreditHold, error)
}

// CreditHold is what one credit_only admission holds of its customer's
// balance (credits.Holds), as the log keeps it.
type CreditHold struct {
	Tenant string
	credits.Hold
}

// creditHoldLookback is how far back of now a new leader reads credit
// holds' Until: a hold ends once a balance's usage runs past its Until,
// and balances run to the last full hour, so older holds have ended
// unless measured usage has stalled for a day (docs/ha.md).
const creditHoldLookback = 24 * time.Hour

// maxUnwritten bounds the admissions kept for the log while it refuses
// them (ClickHouse down): admission goes on from memory, the oldest
// records are dropped and a failover could then forget them.
const maxUnwritten = 100_000

func (r *reservation) admitted(released bool) Admitted {
	return Admitted{ID: r.id, Part: r.part, Tenant: r.tenant, Department: r.department, GPUModel: r.model,
		Demand: r.demand, Expires: r.expires, Released: released}
}

// logged queues r's record for the log.
func (e *Evaluator) logged(a Admitted) {
	if e.logging {
		e.unwritten.add(a)
	}
}

// logQueue holds the records not yet written to the admission log,
// at most maxUnwritten: while the log refuses them the oldest are dropped
// (and counted), and admission goes on from memory.
type logQueue[T any] struct {
	mu      sync.Mutex
	items   []T
	dropped int
}

func (q *logQueue[T]) add(x T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) >= maxUnwritten {
		q.items = q.items[1:]
		q.dropped++
	}
	q.items = append(q.items, x)
}

// take hands over the records and how many were dropped since the last.
func (q *logQueue[T]) take() ([]T, int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	out, dropped := q.items, q.dropped
	q.items, q.dropped = nil, 0
	return out, dropped
}

// putBack returns records the log refused, ahead of newer ones.
func (q *logQueue[T]) putBack(xs []T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.items = append(xs, q.items...)
	if over := len(q.items) - maxUnwritten; over > 0 {
		q.items = q.items[over:]
		q.dropped += over
	}
}

// flushQueue writes what q holds with save, keeping it for the next try
// when save fails; what names the records in the log lines.
func flushQueue[T any](ctx context.Context, logger *slog.Logger, q *logQueue[T], what string, save func(context.Context, []T) error) {
	xs, dropped := q.take()
	if dropped > 0 {
		logger.Error(what+" records dropped while the log refused them; a failover forgets them", "dropped", dropped)
	}
	if len(xs) == 0 {
		return
	}
	if err := save(ctx, xs); err != nil {
		logger.Warn("write "+what+" records; kept for the next try", "records", len(xs), "err", err)
		q.putBack(xs)
	}
}

// Restore replaces the admissions held with as (a new leader's rebuild),
// dropping the expired and released ones.
func (e *Evaluator) Restore(as []Admitted) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	e.queue, e.byTenant, e.sums = nil, map[string][]*reservation{}, map[string]Demand{}
	sort.SliceStable(as, func(i, j int) bool { return as[i].Expires.Before(as[j].Expires) })
	for _, a := range as {
		if a.Released || !now.Before(a.Expires) {
			continue
		}
		e.add(&reservation{id: a.ID, part: a.Part, tenant: a.Tenant, department: a.Department, model: a.GPUModel,
			demand: a.Demand, expires: a.Expires})
	}
}

// LogAdmissions makes the service record what it admits (and releases)
// in log, written by RunLog, and rebuild from it with Rebuild. Call it
// before Run and the first admission.
func (q *Service) LogAdmissions(log AdmissionLog) {
	q.log = log
	q.eval.mu.Lock()
	q.eval.logging = true
	q.eval.mu.Unlock()
	if q.gate != nil {
		q.gate.logging.Store(true)
	}
}

// logFlush is how often admissions are written: a failover forgets at
// most the admissions of the last interval (docs/ha.md).
const logFlush = 100 * time.Millisecond

// RunLog writes the admission records every logFlush until ctx ends,
// then once more.
func (q *Service) RunLog(ctx context.Context) {
	if q.log == nil {
		return
	}
	t := time.NewTicker(logFlush)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			q.flushLog(context.WithoutCancel(ctx))
			return
		case <-t.C:
			q.flushLog(ctx)
		}
	}
}

// FlushLog writes the admission records not written yet: a leader
// calls it when it stops leading, before its successor rebuilds.
func (q *Service) FlushLog(ctx context.Context) {
	if q.log != nil {
		q.flushLog(ctx)
	}
}

func (q *Service) flushLog(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	flushQueue(ctx, q.logger, &q.eval.unwritten, "admission", q.log.SaveAdmissions)
	if q.gate != nil {
		flushQueue(ctx, q.logger, &q.gate.unwritten, "credit hold", q.log.SaveCreditHolds)
	}
}

// Rebuild replaces the admissions held with those the log holds: a new
// leader calls it before its first decision.
func (q *Service) Rebuild(ctx context.Context) error {
	if q.log == nil {
		return nil
	}
	as, err := q.log.HeldAdmissions(ctx, q.now())
	if err != nil {
		return fmt.Errorf("rebuild admitted work: %w", err)
	}
	var holds []CreditHold
	if q.gate != nil {
		if holds, err = q.log.CreditHolds(ctx, q.now().Add(-creditHoldLookback)); err != nil {
			return fmt.Errorf("rebuild credit holds: %w", err)
		}
	}
	q.eval.Restore(as)
	q.gate.restore(holds)
	q.logger.Info("rebuilt admitted work from the admission log", "parts", len(as), "credit_holds", len(holds))
	return nil
}
