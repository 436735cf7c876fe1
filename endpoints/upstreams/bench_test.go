package upstreams

import (
	"context"
	"fmt"
	"testing"
	"time"

	"slurm-llm/endpoints"
)

// allRunning is a scheduler that knows every job as RUNNING.
type allRunning struct{}

func (allRunning) JobStates(_ context.Context, ids []string) (map[string]string, error) {
	m := make(map[string]string, len(ids))
	for _, id := range ids {
		m[id] = "RUNNING"
	}
	return m, nil
}

// BenchmarkSyncUnchanged1000 is one sync pass over 1,000 endpoint files
// when nothing changed (target: under 50 ms a pass), with a fake nginx. It
// reports the reloads made by all the timed passes (target: 0).
func BenchmarkSyncUnchanged1000(b *testing.B) {
	cfg := testConfig(b)
	for i := 0; i < 1000; i++ {
		tier := []string{"fast", "reasoning"}[i%2]
		e := testEndpoint(tier, fmt.Sprint(10000+i), fmt.Sprintf("10.%d.%d.%d", i/65536, i/256%256, i%256), 8080)
		if err := endpoints.Write(cfg.EndpointDir, e); err != nil {
			b.Fatal(err)
		}
	}
	f := &fakeNginx{dir: cfg.OutputDir}
	u := New(cfg, Options{Runner: f, Checker: allRunning{}, Now: func() time.Time { return t0 }})
	if _, err := u.Pass(context.Background()); err != nil {
		b.Fatal(err)
	}
	f.calls = nil
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rep, err := u.Pass(context.Background())
		if err != nil || len(rep.Decisions) != 1000 {
			b.Fatalf("pass: %d decisions, %v", len(rep.Decisions), err)
		}
	}
	b.StopTimer()
	reloads := 0
	for _, c := range f.calls {
		if c == "reload" {
			reloads++
		}
	}
	b.ReportMetric(float64(reloads), "reloads")
	b.ReportMetric(float64(b.N), "passes")
}
