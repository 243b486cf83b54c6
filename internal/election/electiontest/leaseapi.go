// Package electiontest is a Kubernetes API for tests of the Lease
// election: client-go's fake clientset made to behave like an API server
// where the election depends on it. Tests of internal/election and of
// serve's Lease path (cmd/gpumeter) share it.
package electiontest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	ktesting "k8s.io/client-go/testing"
)

// LeaseAPI is the fake clientset with two behaviours of a real API server
// added: every write of a Lease gets a new resourceVersion, and an update
// carrying a stale one is refused with a conflict (the fake's tracker
// alone would let two candidates overwrite each other). Writes by a
// holder that Cut names fail, as if it had lost its connection to the API
// server, until Heal.
type LeaseAPI struct {
	*fake.Clientset
	mu      sync.Mutex
	version int
	cutOff  map[string]bool
	holders []string // each change of holderIdentity written, "" for a release
}

// NewLeaseAPI is an API server with no Lease yet.
func NewLeaseAPI() *LeaseAPI {
	api := &LeaseAPI{Clientset: fake.NewClientset(), cutOff: map[string]bool{}}
	leases := coordinationv1.SchemeGroupVersion.WithResource("leases")
	api.PrependReactor("create", "leases", func(a ktesting.Action) (bool, runtime.Object, error) {
		lease := a.(ktesting.CreateAction).GetObject().(*coordinationv1.Lease)
		if api.isCutOff(Holder(lease)) {
			return true, nil, errors.New("fake API: connection refused")
		}
		api.wrote(lease, "")
		return false, nil, nil // the tracker stores it
	})
	api.PrependReactor("update", "leases", func(a ktesting.Action) (bool, runtime.Object, error) {
		lease := a.(ktesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if api.isCutOff(Holder(lease)) {
			return true, nil, errors.New("fake API: connection refused")
		}
		// The fake holds its lock through the whole reactor chain, so
		// this compare and the tracker's write are one step.
		stored, err := api.Tracker().Get(leases, lease.Namespace, lease.Name)
		if err != nil {
			return false, nil, nil
		}
		old := stored.(*coordinationv1.Lease)
		if rv := old.ResourceVersion; rv != lease.ResourceVersion {
			return true, nil, apierrors.NewConflict(leases.GroupResource(), lease.Name,
				fmt.Errorf("resourceVersion %s is stale, stored %s", lease.ResourceVersion, rv))
		}
		api.wrote(lease, Holder(old))
		return false, nil, nil
	})
	return api
}

// wrote stamps a write's resourceVersion and notes a change of holder.
func (api *LeaseAPI) wrote(lease *coordinationv1.Lease, previous string) {
	api.mu.Lock()
	defer api.mu.Unlock()
	api.version++
	lease.ResourceVersion = strconv.Itoa(api.version)
	if h := Holder(lease); h != previous || len(api.holders) == 0 {
		api.holders = append(api.holders, h)
	}
}

func (api *LeaseAPI) isCutOff(holder string) bool {
	api.mu.Lock()
	defer api.mu.Unlock()
	return api.cutOff[holder]
}

// Cut fails holder's writes from now on.
func (api *LeaseAPI) Cut(holder string) {
	api.mu.Lock()
	defer api.mu.Unlock()
	api.cutOff[holder] = true
}

// Heal lets holder's writes through again.
func (api *LeaseAPI) Heal(holder string) {
	api.mu.Lock()
	defer api.mu.Unlock()
	delete(api.cutOff, holder)
}

// Holders lists the holderIdentity of every change of holder written so
// far, in order ("" where the Lease was released).
func (api *LeaseAPI) Holders() []string {
	api.mu.Lock()
	defer api.mu.Unlock()
	return append([]string(nil), api.holders...)
}

// Lease reads the Lease namespace/name.
func (api *LeaseAPI) Lease(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error) {
	return api.CoordinationV1().Leases(namespace).Get(ctx, name, metav1.GetOptions{})
}

// Holder is a Lease's holderIdentity, "" when none.
func Holder(lease *coordinationv1.Lease) string {
	if lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}
