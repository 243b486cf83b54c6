package credits

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// NoticePublisher puts credit notices in the webhook outbox, each once:
// a notice whose key it published before is dropped (webhook.Publisher).
// It says how many it wrote.
type NoticePublisher interface {
	CreditNotices(ctx context.Context, ns []Notice) (int, error)
}

// Lock takes what keeps two runs (two replicas, serve and `credits
// notify`) from writing at once, serve's credits lease, and returns its
// release; an error ends the run before anything is written.
type Lock func(ctx context.Context) (release func(), err error)

// Job is the credit job `gpumeter serve` runs on credits.schedule (and
// `gpumeter credits notify` once): the recurring allowances that are due
// are written, then every billing customer's balance is burnt down and
// the notices it calls for are published.
type Job struct {
	svc      *Service
	pub      NoticePublisher
	settings Settings
	now      func() time.Time
	logger   *slog.Logger
	lock     Lock // nil: none
}

// NewJob builds the job over the service, publishing to pub.
func NewJob(svc *Service, pub NoticePublisher, settings Settings, now func() time.Time, logger *slog.Logger) *Job {
	return &Job{svc: svc, pub: pub, settings: settings, now: now, logger: logger.With("component", "credits")}
}

// WithLock has each run that has grants to burn hold lock while it works.
func (j *Job) WithLock(lock Lock) *Job {
	j.lock = lock
	return j
}

// JobReport is what a run did.
type JobReport struct {
	Recurring int // allowance grants written
	Customers int // customers whose balance was read
	Due       int // notices due, sent before or not
	Published int // notices new to the outbox
	Failed    int // customers whose balance could not be read
}

// Run runs the job once. A customer whose balance cannot be derived is
// logged and skipped, and the run fails at the end, after the others'
// notices are published; a failed read of the ledger or of the fleet's
// usage fails the run before any is published.
//
// A ledger without a grant, stored or recurring and due, has nothing to
// write, burn or notify: the run ends after that one read, without the
// lock (serve's lease waits 3 s before it decides) or the fleet's usage.
func (j *Job) Run(ctx context.Context) (JobReport, error) {
	grants, err := j.svc.Grants(ctx, "")
	if err != nil {
		return JobReport{}, fmt.Errorf("credit job: %w", err)
	}
	if len(grants) == 0 {
		// What a full run reports: every customer read, a zero balance each.
		return JobReport{Customers: len(j.svc.Customers())}, nil
	}
	if j.lock != nil {
		release, err := j.lock(ctx)
		if err != nil {
			return JobReport{}, fmt.Errorf("credit job: %w", err)
		}
		defer release()
	}
	var rep JobReport
	n, err := j.svc.Recur(ctx)
	rep.Recurring = n
	if err != nil {
		return rep, fmt.Errorf("credit job: %w", err)
	}
	// Every customer's balance in one pass over the fleet's usage.
	balances, err := j.svc.FleetBalances(ctx, j.svc.now())
	if err != nil {
		return rep, fmt.Errorf("credit job: %w", err)
	}
	var due []Notice
	for _, b := range balances {
		if b.Err != nil {
			rep.Failed++
			j.logger.Error("credit balance", "tenant", b.Customer.Tenant, "err", b.Err)
			continue
		}
		rep.Customers++
		due = append(due, Due(b.Customer, b.Result, j.settings, j.now())...)
	}
	rep.Due = len(due)
	if rep.Published, err = j.pub.CreditNotices(ctx, due); err != nil {
		return rep, fmt.Errorf("credit job: %w", err)
	}
	if rep.Recurring > 0 || rep.Published > 0 {
		j.logger.Info("credit job", "recurring_grants", rep.Recurring, "notices", rep.Published)
	}
	if rep.Failed > 0 {
		return rep, fmt.Errorf("credit job: the balance of %d customer(s) could not be read", rep.Failed)
	}
	return rep, nil
}
