package rollup

import (
	"context"
	"time"
)

// ClosedThrough is how far the scheduled rollup has closed hours: the
// hours before it are final. ok is false before its first run.
func (r *Service) ClosedThrough(ctx context.Context) (closed time.Time, ok bool, err error) {
	st, ok, err := r.store.LoadRollupState(ctx, stateKey)
	return st.ClosedThrough, ok, err
}
