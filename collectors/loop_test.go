package collectors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/meter"
)

// fakeSource returns fixed readings, an error, or panics.
type fakeSource struct {
	gpus  []GPUReading
	err   error
	panic bool
	calls [][2]time.Time
}

func (s *fakeSource) Read(_ context.Context, start, end time.Time) ([]GPUReading, error) {
	s.calls = append(s.calls, [2]time.Time{start, end})
	if s.panic {
		panic("driver exploded")
	}
	if s.err != nil {
		return nil, s.err
	}
	return slices.Clone(s.gpus), nil
}

type fakeAttributor struct{ err error }

func (a fakeAttributor) Attribute(_ context.Context, gpus []GPUReading) error {
	for i := range gpus {
		gpus[i].Claims = []Owner{{Tenant: "t-" + gpus[i].GPU.UUID}}
	}
	return a.err
}

// oneRow makes one sample per GPU covering the interval.
func oneRow(dst []Sample, host string, start, end time.Time, g *GPUReading) []Sample {
	tenant := ""
	if len(g.Claims) > 0 {
		tenant = g.Claims[0].Tenant
	}
	return append(dst, Sample{
		ID:      SampleID(host, g.GPU.UUID, tenant, "", start),
		Host:    host,
		GPUUUID: g.GPU.UUID,
		SKU:     "X",
		Tenant:  tenant,
		Start:   start,
		End:     end,
		Values:  meter.Values{GPUMicroseconds: uint64(end.Sub(start) / time.Microsecond)},
	})
}

type recordingObserver struct {
	sourceErrs []string
	gpuFailed  []string
	attrFailed int
	polls      int
	samples    int
	appendErrs int
}

func (o *recordingObserver) SourceRead(host, source string, _ time.Duration, err error) {
	if err != nil {
		o.sourceErrs = append(o.sourceErrs, host+"/"+source)
	}
}
func (o *recordingObserver) GPUFailed(host, uuid string, _ error) {
	o.gpuFailed = append(o.gpuFailed, host+"/"+uuid)
}
func (o *recordingObserver) AttributionFailed(string, error) { o.attrFailed++ }
func (o *recordingObserver) Polled(_ time.Duration, n int, err error) {
	o.polls++
	o.samples += n
	if err != nil {
		o.appendErrs++
	}
}

// manualClock jumps to whatever it is asked to wait for (plus an optional
// lateness per call).
type manualClock struct {
	now  time.Time
	late map[int]time.Duration
	n    int
}

func (c *manualClock) Now() time.Time { return c.now }
func (c *manualClock) WaitUntil(ctx context.Context, t time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.n++
	c.now = t.Add(c.late[c.n])
	return nil
}

type collect struct{ samples []Sample }

func (c *collect) Append(_ context.Context, s []Sample) error {
	c.samples = append(c.samples, s...)
	return nil
}

var t0 = time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)

func TestPollIsolatesFailures(t *testing.T) {
	good := &fakeSource{gpus: []GPUReading{{GPU: GPU{UUID: "GPU-a"}}, {GPU: GPU{UUID: "GPU-lost"}, Err: errors.New("gpu is lost")}, {GPU: GPU{UUID: "GPU-b"}}}}
	broken := &fakeSource{err: errors.New("driver gone")}
	panicky := &fakeSource{panic: true}
	hosts := []Host{
		{Name: "h1", Sources: []NamedSource{{"nvml", good}, {"other", broken}}, Attributor: fakeAttributor{err: errors.New("kubelet down")}},
		{Name: "h2", Sources: []NamedSource{{"nvml", panicky}}},
		{Name: "h3", Sources: []NamedSource{{"nvml", &fakeSource{gpus: []GPUReading{{GPU: GPU{UUID: "GPU-c"}}}}}}},
	}
	out := &collect{}
	obs := &recordingObserver{}
	loop, err := NewLoop(LoopConfig{Interval: 10 * time.Second}, hosts, oneRow, out, &manualClock{now: t0}, slog.New(slog.DiscardHandler), obs)
	if err != nil {
		t.Fatal(err)
	}
	n, err := loop.Poll(context.Background(), t0, t0.Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range out.samples {
		got = append(got, s.Host+"/"+s.GPUUUID+"/"+s.Tenant)
	}
	want := []string{"h1/GPU-a/t-GPU-a", "h1/GPU-b/t-GPU-b", "h3/GPU-c/"}
	if !slices.Equal(got, want) || n != len(want) {
		t.Fatalf("samples %v (n=%d), want %v", got, n, want)
	}
	if !slices.Equal(obs.sourceErrs, []string{"h1/other", "h2/nvml"}) {
		t.Errorf("source errors %v", obs.sourceErrs)
	}
	if !slices.Equal(obs.gpuFailed, []string{"h1/GPU-lost"}) {
		t.Errorf("gpu failures %v", obs.gpuFailed)
	}
	if obs.attrFailed != 1 || obs.polls != 1 || obs.samples != 3 {
		t.Errorf("observer %+v", obs)
	}
}

func TestPollReturnsAppendError(t *testing.T) {
	hosts := []Host{{Name: "h", Sources: []NamedSource{{"nvml", &fakeSource{gpus: []GPUReading{{GPU: GPU{UUID: "GPU-a"}}}}}}}}
	fail := AppenderFunc(func(context.Context, []Sample) error { return errors.New("clickhouse down") })
	obs := &recordingObserver{}
	loop, err := NewLoop(LoopConfig{Interval: 10 * time.Second}, hosts, oneRow, fail, &manualClock{now: t0}, nil, obs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loop.Poll(context.Background(), t0, t0.Add(10*time.Second)); err == nil || !strings.Contains(err.Error(), "clickhouse down") {
		t.Fatalf("err = %v, want the appender's", err)
	}
	if obs.appendErrs != 1 {
		t.Fatalf("append errors %d, want 1", obs.appendErrs)
	}
}

// runUntil runs a 10 s loop over one GPU on clock until until, and returns
// its source and what it appended, each sample's interval as "mm:ss-mm:ss".
func runUntil(t *testing.T, clock *manualClock, until time.Time) (*fakeSource, []Sample, []string) {
	t.Helper()
	src := &fakeSource{gpus: []GPUReading{{GPU: GPU{UUID: "GPU-a"}}}}
	hosts := []Host{{Name: "h", Sources: []NamedSource{{"nvml", src}}}}
	out := &collect{}
	loop, err := NewLoop(LoopConfig{Interval: 10 * time.Second, Until: until}, hosts, oneRow, out, clock, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := loop.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var intervals []string
	for _, s := range out.samples {
		intervals = append(intervals, fmt.Sprintf("%s-%s", s.Start.Format("04:05"), s.End.Format("04:05")))
	}
	return src, out.samples, intervals
}

func TestRunPollsAlignedIntervalsUntilTheEnd(t *testing.T) {
	src, _, got := runUntil(t, &manualClock{now: t0.Add(3 * time.Second)}, t0.Add(35*time.Second))
	// Primed at :03; the first interval ends at the next boundary; the last
	// one is cut at Until.
	want := []string{"00:03-00:10", "00:10-00:20", "00:20-00:30", "00:30-00:35"}
	if !slices.Equal(got, want) {
		t.Fatalf("intervals %v, want %v", got, want)
	}
	if first := src.calls[0]; !first[0].Equal(first[1]) {
		t.Fatalf("first read %v is not a priming read", first)
	}
}

func TestRunCoversALateWakeUpWithOneLongerInterval(t *testing.T) {
	// The second wait wakes 25 s late (a suspended host).
	_, samples, got := runUntil(t, &manualClock{now: t0, late: map[int]time.Duration{2: 25 * time.Second}}, t0.Add(60*time.Second))
	var total uint64
	for _, s := range samples {
		total += s.GPUMicroseconds
	}
	want := []string{"00:00-00:10", "00:10-00:40", "00:40-00:50", "00:50-01:00"}
	if !slices.Equal(got, want) {
		t.Fatalf("intervals %v, want %v", got, want)
	}
	if total != 60_000_000 {
		t.Fatalf("covered %d µs, want the whole minute", total)
	}
}

func TestRunStopsWhenTheContextEnds(t *testing.T) {
	hosts := []Host{{Name: "h", Sources: []NamedSource{{"nvml", &fakeSource{}}}}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	loop, err := NewLoop(LoopConfig{Interval: 10 * time.Second}, hosts, oneRow, &collect{}, &manualClock{now: t0}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := loop.Run(ctx); err != nil {
		t.Fatalf("Run = %v, want nil on cancellation", err)
	}
}

func TestNewLoopRejectsBadInput(t *testing.T) {
	src := NamedSource{"nvml", &fakeSource{}}
	cases := []struct {
		name  string
		cfg   LoopConfig
		hosts []Host
		want  string
	}{
		{"interval below a second", LoopConfig{Interval: time.Millisecond}, []Host{{Name: "h", Sources: []NamedSource{src}}}, "interval"},
		{"no hosts", LoopConfig{Interval: time.Second}, nil, "hosts: none"},
		{"host without name", LoopConfig{Interval: time.Second}, []Host{{Sources: []NamedSource{src}}}, "name missing"},
		{"host without sources", LoopConfig{Interval: time.Second}, []Host{{Name: "h"}}, "no sources"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewLoop(tc.cfg, tc.hosts, oneRow, &collect{}, &manualClock{}, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
