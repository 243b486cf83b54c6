package reports

import (
	"cmp"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/gpumeter/gpumeter/collectors/sim"
)

// SimLedger is what the simulated fleet ran, per tenant: the oracle that
// `collect --simulate` prints to compare with `gpumeter usage`.
type SimLedger struct {
	Hosts      int
	Start, End time.Time
	Written    uint64 // samples handed to the sink
	Tenants    []SimTenant
}

// SimTenant is one tenant's line of the ledger; the empty tenant is idle time.
type SimTenant struct {
	Tenant            string
	GPUMicroseconds   uint64
	EnergyMillijoules float64 // the simulator's own float ledger, not a billed amount
}

// WriteSimLedger prints the ledger as a table.
func WriteSimLedger(w io.Writer, l SimLedger) error {
	if _, err := fmt.Fprintf(w, "simulated %d hosts from %s to %s: %d samples written\n",
		l.Hosts, l.Start.Format(time.RFC3339), l.End.Format(time.RFC3339), l.Written); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tenant\tgpu-seconds\tenergy-kWh\t")
	for _, t := range l.Tenants {
		name := cmp.Or(t.Tenant, "(idle)")
		fmt.Fprintf(tw, "%s\t%d.%06d\t%.3f\t\n", name, t.GPUMicroseconds/1e6, t.GPUMicroseconds%1e6, t.EnergyMillijoules/3.6e9)
	}
	return tw.Flush()
}

// SimLedgerOf is the ledger of what fleet ran so far, with written the
// samples the collector handed on.
func SimLedgerOf(fleet *sim.Fleet, written uint64) SimLedger {
	l := fleet.Ledger()
	out := SimLedger{Hosts: len(fleet.Hosts()), Start: fleet.Start(), End: fleet.Now(), Written: written}
	for _, t := range l.Tenants() {
		out.Tenants = append(out.Tenants, SimTenant{Tenant: t, GPUMicroseconds: l.GPUMicroseconds[t], EnergyMillijoules: l.EnergyMillijoules[t]})
	}
	return out
}
