package sacct

import (
	"os"
	"strings"
	"testing"
	"time"
)

// FuzzParseSacct feeds sacct output to Parse and what it accepts to
// Samples: no panic, and either an error or values that hold together.
func FuzzParseSacct(f *testing.F) {
	for _, name := range []string{"slurm-24.05.txt", "slurm-23.02.txt"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add("Cluster|JobID|Account|Start|End|Elapsed|AllocTRES\nc|1|a|1796410429|1796414029|01:00:00|gres/gpu=1\n")
	cfg := testConfig(f)
	f.Fuzz(func(t *testing.T, in string) {
		jobs, err := Parse(strings.NewReader(in), Options{Cluster: "fuzz", Location: time.UTC})
		if err != nil {
			return
		}
		for _, j := range jobs {
			if !isID(j.JobID, false) || j.Elapsed < 0 || j.RequestedGPUs < -1 {
				t.Fatalf("bad job %+v", j)
			}
			for _, g := range j.GPUs {
				if g.Count <= 0 {
					t.Fatalf("bad GPU count %+v", j)
				}
			}
		}
		rows, _, err := Samples(jobs, cfg)
		if err != nil {
			return
		}
		for _, r := range rows {
			s := r.Sample
			span := s.End.Sub(s.Start)
			if span <= 0 || uint64(span.Microseconds()) < s.GPUMicroseconds || s.Host == "" || s.GPUUUID == "" || s.SKU == "" || s.Tenant == "" {
				t.Fatalf("bad row %+v", s)
			}
		}
	})
}

// FuzzParseAccounts feeds sacctmgr output to ParseAccounts: no panic, no
// endless walk up the tree, and every accepted account's ancestors are
// accounts of the listing.
func FuzzParseAccounts(f *testing.F) {
	f.Add(sacctmgrAssoc)
	f.Add("Cluster|Account|User|Partition|Par Name|Share\nc|root||||1\nc|bio|||root|1\n")
	f.Add("Account|ParentName\na|b\nb|c\nc|a\n")
	f.Fuzz(func(t *testing.T, in string) {
		acc, err := ParseAccounts(strings.NewReader(in))
		if err != nil {
			return
		}
		for account, dept := range acc.Departments(1) {
			if !acc.Known(account) || dept == "" {
				t.Fatalf("account %q: department %q", account, dept)
			}
			for level := 1; level <= 3; level++ {
				if _, ok := acc.Ancestor(account, level); !ok {
					t.Fatalf("account %q lost at level %d", account, level)
				}
			}
		}
	})
}
