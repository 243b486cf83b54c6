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
	steps  []Step
	logger *slog.Logger
}

// NewChain returns a chain of the given steps.
func NewChain(logger *slog.Logger, steps ...Step) *Chain {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Chain{steps: steps, logger: logger}
}

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
	}
	return errors.Join(errs...)
}
