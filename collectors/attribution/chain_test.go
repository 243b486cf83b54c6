package attribution

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/collectors"
)

type stepFunc func(gpus []collectors.GPUReading) error

func (f stepFunc) Attribute(_ context.Context, gpus []collectors.GPUReading) error { return f(gpus) }

func TestChainRunsEveryStepInOrder(t *testing.T) {
	var order []string
	step := func(name string, err error) Step {
		return Step{Name: name, Attributor: stepFunc(func([]collectors.GPUReading) error {
			order = append(order, name)
			return err
		})}
	}
	c := NewChain(nil,
		step("kubelet", fmt.Errorf("socket: %w", collectors.ErrNoData)),
		step("cgroup", errors.New("proc unreadable")),
		step("static", nil))
	err := c.Attribute(context.Background(), nil)
	if strings.Join(order, ",") != "kubelet,cgroup,static" {
		t.Fatalf("order %v", order)
	}
	if err == nil || !strings.Contains(err.Error(), "cgroup: proc unreadable") || strings.Contains(err.Error(), "kubelet") {
		t.Fatalf("err = %v, want only the cgroup failure", err)
	}
}
