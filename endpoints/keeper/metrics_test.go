package keeper

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"

	"slurm-llm/endpoints/members"
	"slurm-llm/endpoints/promtest"
	"slurm-llm/slurm"
)

// TestMetrics drives a keeper with a replicas tier, an elastic tier and a
// plain one through a release check, a pass and a scale check against the
// fake scheduler, and reads the figures an admin graphs: replicas wanted,
// pending, running and routed; members wanted, pending, running and live;
// what the keeper submitted and cancelled.
func TestMetrics(t *testing.T) {
	cfg, f, epDir, uid := scaleRig(t)
	elasticTier := DefaultTier
	elasticTier.Name, elasticTier.JobName, elasticTier.Script, elasticTier.Members = "reasoning", "llm-reasoning", "/s/r.sbatch", 3
	plain := DefaultTier
	plain.Name, plain.JobName, plain.Script, plain.Members = "small", "llm-small", "/s/small.sbatch", 1
	cfg.Tiers["reasoning"], cfg.Tiers["small"] = elasticTier, plain

	mine := func(j slurm.QueuedJob) slurm.QueuedJob { j.UID = uid; return j }
	stale := mine(job("12", "llm-fast-extra", slurm.JobPending, "")) // pending past start_timeout: cancelled
	f.queued = []slurm.QueuedJob{
		mine(job("10", "llm-fast", slurm.JobRunning, "node1")),
		mine(job("11", "llm-fast-extra", slurm.JobRunning, "node2")),
		stale,
		mine(job("20", "llm-reasoning", slurm.JobRunning, "node1")),
		mine(job("21", "llm-reasoning", slurm.JobRunning, "node2")),
		mine(job("22", "llm-reasoning", slurm.JobPending, "")),
	}
	f.queue["llm-fast"] = []slurm.JobRef{{ID: "10", State: slurm.JobRunning}}
	f.queue["llm-reasoning"] = []slurm.JobRef{{ID: "20", State: slurm.JobRunning}, {ID: "21", State: slurm.JobRunning}, {ID: "22", State: slurm.JobPending}}
	writeEndpoint(t, epDir, "10", 0)
	writeEndpoint(t, epDir, "11", 0)
	store := members.NewStore(epDir, "reasoning", []uint32{uid})
	for i, st := range []members.State{members.StateReady, members.StateJoining} {
		m := members.Member{Schema: members.SchemaVersion, Tier: "reasoning", JobID: []string{"20", "21"}[i], RunID: "0123456789abcdef",
			Node: "node1", Addr: "10.0.0.1", RPCPort: 50052, State: st, Heartbeat: scaleNow, LeaseExpires: scaleNow.Add(10 * time.Second)}
		if err := store.WriteMember(m); err != nil {
			t.Fatal(err)
		}
	}
	k := New(cfg, Options{Scheduler: f, Now: func() time.Time { return scaleNow }, Owner: &uid})

	k.Release(context.Background())
	if _, err := k.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Scale(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.queueErr = slurm.ErrUnavailable
	k.Release(context.Background()) // counted; the figures stay the last listing's

	got := scrape(t, k)
	for _, want := range []string{
		// min 1 plus one extra running; the stale one cancelled.
		`llm_keeper_replicas{tier="fast",state="wanted"} 2`,
		`llm_keeper_replicas{tier="fast",state="pending"} 1`,
		`llm_keeper_replicas{tier="fast",state="running"} 2`,
		`llm_keeper_replicas{tier="fast",state="routed"} 2`,
		`llm_keeper_replicas_bound{tier="fast",bound="min"} 1`,
		`llm_keeper_replicas_bound{tier="fast",bound="max"} 3`,
		`llm_keeper_cancelled_total{tier="fast",kind="extra"} 1`,
		`llm_keeper_submitted_total{tier="fast",kind="extra"} 0`,
		// the plain tier had no job: the pass submitted it.
		`llm_keeper_replicas{tier="small",state="wanted"} 1`,
		`llm_keeper_replicas{tier="small",state="routed"} 0`,
		`llm_keeper_submitted_total{tier="small",kind="kept"} 1`,
		`llm_keeper_members{tier="reasoning",state="wanted"} 3`,
		`llm_keeper_members{tier="reasoning",state="pending"} 1`,
		`llm_keeper_members{tier="reasoning",state="running"} 2`,
		`llm_keeper_members{tier="reasoning",state="live"} 1`,
		`llm_keeper_members{tier="reasoning",state="leading"} 0`, // members, none leads (issue 29's alert)
		`llm_keeper_scheduler_errors_total 1`,
		fmt.Sprintf("llm_keeper_last_listing_timestamp_seconds %g", float64(scaleNow.Unix())),
	} {
		key, v, err := promtest.Line(want)
		if err != nil {
			t.Fatal(err)
		}
		if g, ok := got[key]; !ok || g != v {
			t.Errorf("metrics lack %s (%v, %v); got:\n%v", want, g, ok, got)
		}
	}
	for key := range got {
		for _, never := range []string{`llm_keeper_members{state="wanted",tier="fast"}`, `llm_keeper_replicas{state="wanted",tier="reasoning"}`,
			`llm_keeper_submitted_total{kind="extra",tier="small"}`, `llm_keeper_replicas_bound{bound="min",tier="small"}`} {
			if key == never {
				t.Errorf("metrics have %s", never)
			}
		}
	}

	// Member 20 takes term 1 and leads it: the tier has a leader.
	if err := store.TakeTerm(members.Term{Schema: members.SchemaVersion, N: 1, JobID: "20", RunID: "0123456789abcdef",
		Node: "node1", Created: scaleNow}); err != nil {
		t.Fatal(err)
	}
	lead := members.Member{Schema: members.SchemaVersion, Tier: "reasoning", JobID: "20", RunID: "0123456789abcdef",
		Node: "node1", Addr: "10.0.0.1", RPCPort: 50052, State: members.StateReady, Term: 1, Leads: true,
		Heartbeat: scaleNow, LeaseExpires: scaleNow.Add(10 * time.Second)}
	if err := store.WriteMember(lead); err != nil {
		t.Fatal(err)
	}
	if got := scrape(t, k); got[`llm_keeper_members{state="leading",tier="reasoning"}`] != 1 {
		t.Errorf("with a leader, leading = %v, want 1", got[`llm_keeper_members{state="leading",tier="reasoning"}`])
	}

	// An admin's disable: nothing wanted.
	if _, err := k.DisableTier(context.Background(), "reasoning", false); err != nil {
		t.Fatal(err)
	}
	if got := scrape(t, k); got[`llm_keeper_members{state="wanted",tier="reasoning"}`] != 0 {
		t.Errorf("after disable, members wanted %v, want 0", got[`llm_keeper_members{state="wanted",tier="reasoning"}`])
	}
	// The families, their types, labels and help texts are a contract with
	// dashboards and alerts (go test -run TestMetrics -args -update-metrics
	// rewrites the golden file on purpose).
	fams, err := promtest.Families(k.Gatherer())
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "metrics-families.golden")
	listed := strings.Join(fams, "\n") + "\n"
	if *updateMetrics {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(listed), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if want, err := os.ReadFile(golden); err != nil || string(want) != listed {
		t.Errorf("metric families changed (%v):\n%s\nwant:\n%s", err, listed, want)
	}
}

var updateMetrics = flag.Bool("update-metrics", false, "rewrite testdata/metrics-families.golden")

// scrape is what the keeper's /metrics serves, as samples.
func scrape(t *testing.T, k *Keeper) map[string]float64 {
	t.Helper()
	fams, err := k.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	s, err := promtest.Samples(b.String())
	if err != nil {
		t.Fatalf("not Prometheus text: %v\n%s", err, b.String())
	}
	return s
}
