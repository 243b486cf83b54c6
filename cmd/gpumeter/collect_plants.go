package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/gpumeter/gpumeter/collectors/sim"
)

// plantFlags plant the insights cases in the simulated fleet (sim.Plants):
// a hoarding tenant, a tenant on an oversized 7g MIG instance, a one-hour
// spike. None given plants nothing.
type plantFlags struct {
	hoarder, oversized, spike, spikeAt string
	hoardGPUs, spikeGPUs               int
}

func (p *plantFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&p.hoarder, "plant-hoarder", "", "with --simulate, this tenant holds whole GPUs idle for the whole run")
	fs.IntVar(&p.hoardGPUs, "plant-hoard-gpus", 1, "GPUs the --plant-hoarder tenant holds")
	fs.StringVar(&p.oversized, "plant-oversized-mig", "", "with --simulate, this tenant runs a small job on a whole 7g MIG instance")
	fs.StringVar(&p.spike, "plant-spike", "", "with --simulate, this tenant uses --plant-spike-gpus GPUs in the one hour --plant-spike-at, nothing else")
	fs.StringVar(&p.spikeAt, "plant-spike-at", "", "the spike's hour, RFC 3339, a whole UTC hour within the run")
	fs.IntVar(&p.spikeGPUs, "plant-spike-gpus", 6, "GPUs of the spike (5 or more clear the default anomaly threshold)")
}

// parse gives the plants, nil when none is asked for.
func (p plantFlags) parse(simulate bool) (*sim.Plants, error) {
	if p.hoarder == "" && p.oversized == "" && p.spike == "" {
		if p.spikeAt != "" {
			return nil, errors.New("--plant-spike-at: only with --plant-spike")
		}
		return nil, nil
	}
	if !simulate {
		return nil, errors.New("--plant-*: only with --simulate")
	}
	out := &sim.Plants{Hoarder: p.hoarder, HoardGPUs: p.hoardGPUs, OversizedMIG: p.oversized, Spike: p.spike, SpikeGPUs: p.spikeGPUs}
	var errs []error
	if p.spike != "" {
		at, err := time.Parse(time.RFC3339, p.spikeAt)
		switch {
		case p.spikeAt == "":
			errs = append(errs, errors.New("--plant-spike needs --plant-spike-at"))
		case err != nil:
			errs = append(errs, fmt.Errorf("--plant-spike-at: %q is not RFC 3339", p.spikeAt))
		default:
			out.SpikeAt = at.UTC()
		}
	} else if p.spikeAt != "" {
		errs = append(errs, errors.New("--plant-spike-at: only with --plant-spike"))
	}
	if p.hoardGPUs < 1 || p.spikeGPUs < 1 {
		errs = append(errs, errors.New("--plant-hoard-gpus and --plant-spike-gpus: at least 1"))
	}
	return out, errors.Join(errs...)
}
