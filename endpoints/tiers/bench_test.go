package tiers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"slurm-llm/endpoints"
)

// allRunning is a scheduler that knows every job as RUNNING.
type allRunning struct{}

func (allRunning) Jobs(_ context.Context, ids []string) (map[string]Job, error) {
	m := make(map[string]Job, len(ids))
	for _, id := range ids {
		n, _ := strconv.Atoi(id)
		m[id] = Job{State: "RUNNING", UID: uint32(os.Getuid()), Name: "llm-" + []string{"fast", "reasoning"}[n%2]}
	}
	return m, nil
}

// settle dates a file a minute back, as a file last written before the
// sweep before: the scanner trusts its cache only for files older than
// racyWindow.
func settle(b *testing.B, path string) {
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(path, old, old); err != nil {
		b.Fatal(err)
	}
}

// bench1000 is a config over 1,000 settled endpoint files (half fast,
// half reasoning), all RUNNING, and an updater (no consumer: the core
// alone; the nginx consumer's cost is BenchmarkSyncUnchanged1000's) that
// has run one pass.
func bench1000(b *testing.B) *Updater {
	cfg := testConfig(b)
	for i := 0; i < 1000; i++ {
		tier := []string{"fast", "reasoning"}[i%2]
		e := testEndpoint(tier, fmt.Sprint(10000+i), fmt.Sprintf("10.%d.%d.%d", i/65536, i/256%256, i%256), 8080)
		if err := endpoints.Write(cfg.EndpointDir, e); err != nil {
			b.Fatal(err)
		}
		settle(b, filepath.Join(cfg.EndpointDir, endpoints.FileName(tier, e.JobID)))
	}
	u := New(cfg, Options{Scheduler: allRunning{}, Now: func() time.Time { return t0 }})
	if _, err := u.Pass(context.Background()); err != nil {
		b.Fatal(err)
	}
	return u
}

// BenchmarkSweepUnchanged1000 is what watch does every sweep_interval
// when nothing changed: one pass under the lock over 1,000 files, the
// scheduler's answer reused (younger than scheduler.max_age).
func BenchmarkSweepUnchanged1000(b *testing.B) {
	u := bench1000(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rep, err := u.lockedPass(context.Background())
		if err != nil || len(rep.Decisions) != 1000 || !rep.Decisions[0].Live {
			b.Fatalf("pass: %d decisions, %v", len(rep.Decisions), err)
		}
	}
}

// BenchmarkScan1000 compares reading 1,000 unchanged files with
// endpoints.ReadDir (a read and a parse each) and with the updater's
// scanner (an open and an fstat each, the parse cached).
func BenchmarkScan1000(b *testing.B) {
	u := bench1000(b)
	b.Run("readdir", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := endpoints.ReadDir(u.cfg.EndpointDir, endpoints.ReadOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		parsed := 0
		for i := 0; i < b.N; i++ {
			res, err := u.scan()
			if err != nil {
				b.Fatal(err)
			}
			parsed += res.parsed
		}
		b.ReportMetric(float64(parsed)/float64(b.N), "parsed/op")
	})
}
