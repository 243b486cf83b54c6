package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// KubernetesOptions configure a Lease elector.
type KubernetesOptions struct {
	// Client of the coordination.k8s.io API (a clientset's
	// CoordinationV1()): the elector touches Leases only.
	Client coordinationclient.CoordinationV1Interface
	// Namespace and Name of the coordination.k8s.io Lease.
	Namespace string
	Name      string
	// Identity is this replica's host:port, written as holderIdentity.
	Identity string
	// LeaseDuration: how long the others wait after the last renewal they
	// saw before taking over (whole seconds: the Lease stores seconds).
	LeaseDuration time.Duration
	// RenewDeadline: how long the leader keeps failing to renew before it
	// steps down; shorter than LeaseDuration, so it steps down first.
	RenewDeadline time.Duration
	// RetryPeriod between tries to acquire or renew.
	RetryPeriod time.Duration
	Logger      *slog.Logger
}

// Kubernetes elects through a Lease with client-go's leaderelection, the
// way kube-scheduler and controller managers do. Its fencing token is the
// Lease's leaseTransitions, which grows whenever the holder changes.
type Kubernetes struct {
	opts KubernetesOptions
	log  *slog.Logger

	mu          sync.Mutex
	term        *Term
	stopRun     context.CancelFunc // stops the running leaderelection loop
	runDone     chan struct{}      // closed when that loop has returned
	campaigning bool
	closed      bool
}

var _ Elector = (*Kubernetes)(nil)

// NewKubernetes checks the options; nothing is contacted until Campaign.
func NewKubernetes(opts KubernetesOptions) (*Kubernetes, error) {
	var errs []error
	if opts.Client == nil {
		errs = append(errs, errors.New("no Kubernetes client"))
	}
	if opts.Namespace == "" {
		errs = append(errs, errors.New("namespace: required"))
	}
	if err := validateName(opts.Name); err != nil {
		errs = append(errs, err)
	}
	if err := ValidateIdentity(opts.Identity); err != nil {
		errs = append(errs, err)
	}
	if err := validateLeaseTimes(opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("election: kubernetes: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Kubernetes{opts: opts, log: log.With("election", opts.Name, "identity", opts.Identity)}, nil
}

// validateLeaseTimes holds what client-go's NewLeaderElector demands, plus
// whole seconds for the lease (it is stored in seconds, truncated).
func validateLeaseTimes(lease, renew, retry time.Duration) error {
	var errs []error
	if lease < time.Second || lease%time.Second != 0 {
		errs = append(errs, fmt.Errorf("lease duration %s: whole seconds, at least 1s", lease))
	}
	if renew <= 0 || renew >= lease {
		errs = append(errs, fmt.Errorf("renew deadline %s: positive and shorter than the lease duration %s", renew, lease))
	}
	if retry <= 0 || float64(renew) <= leaderelection.JitterFactor*float64(retry) {
		errs = append(errs, fmt.Errorf("retry period %s: positive, and %.1f times it shorter than the renew deadline %s", retry, leaderelection.JitterFactor, renew))
	}
	return errors.Join(errs...)
}

// Campaign implements Elector.
func (k *Kubernetes) Campaign(ctx context.Context) (*Term, error) {
	k.mu.Lock()
	switch {
	case k.closed:
		k.mu.Unlock()
		return nil, errors.New("election: kubernetes: closed")
	case k.campaigning:
		k.mu.Unlock()
		return nil, errors.New("election: kubernetes: a campaign is already running")
	case k.term != nil && k.term.Held():
		k.mu.Unlock()
		return nil, errors.New("election: kubernetes: already leading")
	}
	k.campaigning = true
	previous := k.runDone
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.campaigning = false
		k.mu.Unlock()
	}()
	// The loop of an ended term has stopped renewing; wait until it has
	// returned, so that two loops never run for one replica.
	if previous != nil {
		select {
		case <-previous:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}

	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: k.opts.Namespace, Name: k.opts.Name},
		Client:     k.opts.Client,
		LockConfig: resourcelock.ResourceLockConfig{Identity: k.opts.Identity},
	}
	started := make(chan context.Context, 1)
	stopped := make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: k.opts.LeaseDuration,
		RenewDeadline: k.opts.RenewDeadline,
		RetryPeriod:   k.opts.RetryPeriod,
		Name:          k.opts.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leading context.Context) { started <- leading },
			OnStoppedLeading: func() {},
		},
		// Released by Resign, after the term has ended: client-go would
		// release before the term's context is cancelled.
		ReleaseOnCancel: false,
	})
	if err != nil {
		return nil, fmt.Errorf("election: kubernetes: %w", err)
	}
	runCtx, stopRun := context.WithCancel(klog.NewContext(context.Background(), logr.FromSlogHandler(k.log.Handler())))
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		defer close(stopped)
		le.Run(runCtx)
	}()
	k.mu.Lock()
	k.stopRun, k.runDone = stopRun, runDone
	k.mu.Unlock()

	var leading context.Context
	select {
	case leading = <-started:
	case <-ctx.Done():
		stopRun()
		<-runDone
		// Acquired just as the campaign was called off: give the Lease
		// back rather than make the others wait out a whole lease.
		select {
		case <-started:
			rctx, cancel := context.WithTimeout(context.Background(), k.opts.RenewDeadline)
			defer cancel()
			if err := k.release(rctx); err != nil {
				k.log.Warn("election: releasing a lease acquired after the campaign ended", "err", err)
			}
		default:
		}
		return nil, ctx.Err()
	case <-stopped:
		stopRun()
		return nil, errors.New("election: kubernetes: the election loop stopped before leading")
	}

	token, err := k.token(ctx)
	if err != nil {
		stopRun()
		return nil, err
	}
	term := newTerm(Leader{Identity: k.opts.Identity, Token: token})
	k.mu.Lock()
	k.term = term
	k.mu.Unlock()
	go func() {
		select {
		case <-leading.Done():
			// client-go gave up renewing (RenewDeadline passed) or was stopped.
			k.mu.Lock()
			if k.term == term {
				k.term = nil
			}
			k.mu.Unlock()
			term.end(fmt.Errorf("%w: lease %s/%s not renewed", ErrLeadershipLost, k.opts.Namespace, k.opts.Name))
			stopRun()
		case <-term.Done():
		}
	}()
	k.log.Info("election: leading", "token", token)
	return term, nil
}

// token reads leaseTransitions right after acquiring: the Lease must name
// this replica, or the term never began.
func (k *Kubernetes) token(ctx context.Context) (int64, error) {
	lease, err := k.opts.Client.Leases(k.opts.Namespace).Get(ctx, k.opts.Name, metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("election: kubernetes: read lease %s/%s: %w", k.opts.Namespace, k.opts.Name, err)
	}
	if holder := holderOf(lease); holder != k.opts.Identity {
		return 0, fmt.Errorf("election: kubernetes: lease %s/%s is held by %q right after acquiring it", k.opts.Namespace, k.opts.Name, holder)
	}
	if lease.Spec.LeaseTransitions == nil {
		return 0, nil
	}
	return int64(*lease.Spec.LeaseTransitions), nil
}

// Leader implements Elector: the Lease's holderIdentity. An expired but
// not yet taken Lease still names its holder: judging expiry from the
// renewTime another replica wrote would need the clocks to agree, and a
// forward to a dead leader fails anyway.
func (k *Kubernetes) Leader(ctx context.Context) (Leader, error) {
	lease, err := k.opts.Client.Leases(k.opts.Namespace).Get(ctx, k.opts.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Leader{}, ErrNoLeader
	}
	if err != nil {
		return Leader{}, fmt.Errorf("election: kubernetes: read lease %s/%s: %w", k.opts.Namespace, k.opts.Name, err)
	}
	holder := holderOf(lease)
	if holder == "" {
		return Leader{}, ErrNoLeader
	}
	var token int64
	if lease.Spec.LeaseTransitions != nil {
		token = int64(*lease.Spec.LeaseTransitions)
	}
	return Leader{Identity: holder, Token: token}, nil
}

func holderOf(lease *coordinationv1.Lease) string {
	if lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// Resign implements Elector: the term ends, the election loop stops, and
// then the Lease is released (holder cleared) so another replica can take
// it at its next retry instead of after a whole lease duration.
func (k *Kubernetes) Resign(ctx context.Context) error {
	k.mu.Lock()
	term, stopRun, runDone := k.term, k.stopRun, k.runDone
	k.term = nil
	k.mu.Unlock()
	if term != nil {
		term.end(ErrResigned)
	}
	if stopRun == nil {
		return nil
	}
	stopRun()
	select {
	case <-runDone:
	case <-ctx.Done():
		return fmt.Errorf("election: kubernetes: waiting for the election loop to stop: %w", ctx.Err())
	}
	if term == nil {
		return nil
	}
	return k.release(ctx)
}

// release clears holderIdentity if this replica still holds the Lease; the
// update carries the read's resourceVersion, so it never overwrites a
// successor.
func (k *Kubernetes) release(ctx context.Context) error {
	leases := k.opts.Client.Leases(k.opts.Namespace)
	lease, err := leases.Get(ctx, k.opts.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("election: kubernetes: release lease %s/%s: %w", k.opts.Namespace, k.opts.Name, err)
	}
	if holderOf(lease) != k.opts.Identity {
		return nil
	}
	empty, one := "", int32(1)
	now := metav1.NewMicroTime(time.Now())
	lease.Spec.HolderIdentity = &empty
	lease.Spec.LeaseDurationSeconds = &one
	lease.Spec.RenewTime = &now
	lease.Spec.AcquireTime = &now
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("election: kubernetes: release lease %s/%s: %w", k.opts.Namespace, k.opts.Name, err)
	}
	k.log.Info("election: resigned")
	return nil
}

// Close implements Elector.
func (k *Kubernetes) Close() error {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return nil
	}
	k.closed = true
	k.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), k.opts.RenewDeadline)
	defer cancel()
	return k.Resign(ctx)
}
