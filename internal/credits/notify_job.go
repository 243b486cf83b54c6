package credits

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// NoticePublisher puts credit notices in the webhook outbox, each once:
// a notice whose key it published before is dropped (webhook.Publisher).
// CreditNotices says how many it wrote; UnpublishedCreditNotices, writing
// nothing, how many of ns it would write now.
type NoticePublisher interface {
	CreditNotices(ctx context.Context, ns []Notice) (int, error)
	UnpublishedCreditNotices(ctx context.Context, ns []Notice) (int, error)
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

// WithLock has each run that has something to write hold lock while it
// writes it.
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
// Only a run with something to write takes the lock (serve's lease waits
// 3 s before it decides). A ledger without a grant, stored or recurring
// and due, has nothing to write, burn or notify: the run ends after that
// one read. With grants and a lock, a run whose allowances are all
// written looks first: when every notice due is in the outbox already it
// ends there, with what a run under the lock would report; otherwise it
// takes the lock and does it all again, from the ledger on.
func (j *Job) Run(ctx context.Context) (JobReport, error) {
	stored, unwritten, err := j.svc.unwrittenAllowances(ctx)
	if err != nil {
		return JobReport{}, fmt.Errorf("credit job: %w", err)
	}
	if stored+len(unwritten) == 0 {
		// What a full run reports: every customer read, a zero balance each.
		return JobReport{Customers: len(j.svc.Customers())}, nil
	}
	if j.lock != nil {
		if len(unwritten) == 0 {
			b, err := j.burn(ctx)
			if err != nil {
				return JobReport{}, err
			}
			fresh, err := j.pub.UnpublishedCreditNotices(ctx, b.due)
			if err != nil {
				return JobReport{}, fmt.Errorf("credit job: %w", err)
			}
			if fresh == 0 {
				return j.report(b.report, b)
			}
		}
		release, err := j.lock(ctx)
		if err != nil {
			return JobReport{}, fmt.Errorf("credit job: %w", err)
		}
		defer release()
	}
	n, err := j.svc.Recur(ctx)
	if err != nil {
		return JobReport{Recurring: n}, fmt.Errorf("credit job: %w", err)
	}
	b, err := j.burn(ctx)
	b.report.Recurring = n
	if err != nil {
		return JobReport{Recurring: n}, err
	}
	j.logFailures(b)
	rep := b.report
	if rep.Published, err = j.pub.CreditNotices(ctx, b.due); err != nil {
		return rep, fmt.Errorf("credit job: %w", err)
	}
	return j.report(rep, burnt{})
}

// burnt is every customer's balance burnt down and the notices due.
type burnt struct {
	report JobReport // Customers, Due and Failed
	due    []Notice
	failed []FleetBalance
}

// burn reads every customer's balance, in one pass over the fleet's
// usage, and decides the notices due.
func (j *Job) burn(ctx context.Context) (burnt, error) {
	var b burnt
	balances, err := j.svc.FleetBalances(ctx, j.svc.now())
	if err != nil {
		return b, fmt.Errorf("credit job: %w", err)
	}
	for _, fb := range balances {
		if fb.Err != nil {
			b.failed = append(b.failed, fb)
			continue
		}
		b.report.Customers++
		b.due = append(b.due, Due(fb.Customer, fb.Result, j.settings, j.now())...)
	}
	b.report.Due, b.report.Failed = len(b.due), len(b.failed)
	return b, nil
}

// logFailures logs each customer whose balance could not be read.
func (j *Job) logFailures(b burnt) {
	for _, fb := range b.failed {
		j.logger.Error("credit balance", "tenant", fb.Customer.Tenant, "err", fb.Err)
	}
}

// report ends a run that wrote what rep says, logging b's failures
// (those not logged yet): it fails when a customer's balance could not
// be read.
func (j *Job) report(rep JobReport, b burnt) (JobReport, error) {
	j.logFailures(b)
	if rep.Recurring > 0 || rep.Published > 0 {
		j.logger.Info("credit job", "recurring_grants", rep.Recurring, "notices", rep.Published)
	}
	if rep.Failed > 0 {
		return rep, fmt.Errorf("credit job: the balance of %d customer(s) could not be read", rep.Failed)
	}
	return rep, nil
}
