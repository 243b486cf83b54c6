// Package attribution decides who used a GPU: it maps GPUs, MIG devices
// and processes to workloads and tenants (kubelet.go, cgroup.go,
// static.go), and apportions one interval's reading into samples
// (apportion.go, pure).
package attribution

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/gpumeter/gpumeter/collectors"
)

// Step is one attribution source in a Chain.
type Step struct {
	Name       string
	Attributor collectors.Attributor
}

// Chain runs attribution sources in order (DESIGN.md: kubelet, then
// cgroup, then the static map); each fills only what the earlier ones left
// empty. A source that fails does not stop the others.
type Chain struct {
	steps   []Step
	logger  *slog.Logger
	observe func(source string, err error)
}

// NewChain returns a chain of the given steps.
func NewChain(logger *slog.Logger, steps ...Step) *Chain {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Chain{steps: steps, logger: logger}
}

// Observe makes the chain report each source's outcome every poll to fn
// (the collector's gpumeter_collector_attribution_source_success): each
// step under its name, and the sources a step holds inside (a step's
// SubSources, e.g. the kubelet step's ResourceSlices read) under theirs.
// A source with nothing on this host (collectors.ErrNoData) is not
// reported. It returns c.
func (c *Chain) Observe(fn func(source string, err error)) *Chain {
	c.observe = fn
	return c
}

// SourceError is the failure of a source held inside a step, reported
// under the source's name; the step itself did its part.
type SourceError struct {
	Source string
	Err    error
}

func (e *SourceError) Error() string { return e.Source + ": " + e.Err.Error() }
func (e *SourceError) Unwrap() error { return e.Err }

// subSourcer is a step holding sources of its own.
type subSourcer interface{ SubSources() []string }

// Attribute runs every step. "Nothing here" (collectors.ErrNoData, e.g. no
// kubelet on a Slurm node) is logged at debug; other failures are returned
// joined, after all steps ran.
func (c *Chain) Attribute(ctx context.Context, gpus []collectors.GPUReading) error {
	var errs []error
	for _, s := range c.steps {
		err := s.Attributor.Attribute(ctx, gpus)
		switch {
		case err == nil:
		case errors.Is(err, collectors.ErrNoData):
			c.logger.Debug("attribution source has nothing on this host", "source", s.Name, "err", err)
		default:
			errs = append(errs, fmt.Errorf("%s: %w", s.Name, err))
		}
		c.report(s, err)
	}
	return errors.Join(errs...)
}

// report hands the step's outcome, and its sub-sources', to the observer.
func (c *Chain) report(s Step, err error) {
	if c.observe == nil || errors.Is(err, collectors.ErrNoData) {
		return
	}
	subs := map[string]error{}
	var names []string
	if ss, ok := s.Attributor.(subSourcer); ok {
		names = ss.SubSources()
		for _, n := range names {
			subs[n] = nil
		}
	}
	var own []error
	parts := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		parts = j.Unwrap()
	}
	for _, e := range parts {
		var se *SourceError
		if errors.As(e, &se) {
			if _, ok := subs[se.Source]; ok {
				subs[se.Source] = se.Err
				continue
			}
		}
		if e != nil {
			own = append(own, e)
		}
	}
	c.observe(s.Name, errors.Join(own...))
	for _, n := range names {
		c.observe(n, subs[n])
	}
}
