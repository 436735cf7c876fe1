package keeper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/fsutil"
	"slurm-llm/slurm"
)

const owner = 1000

var scaleNow = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func fastReplicas() TierConfig {
	tc := DefaultTier
	tc.Name, tc.JobName, tc.Script = "fast", "llm-fast", "/s/fast.sbatch"
	tc.Replicas = DefaultReplicas
	tc.Replicas.Max, tc.Replicas.ExtraJobName = 3, "llm-fast-extra"
	return tc
}

// parts: the local cluster's two partitions over node1-3.
var parts = map[string]slurm.Partition{
	"gpu_ai":   {Name: "gpu_ai", PriorityTier: 1, Nodes: []string{"node1", "node2", "node3"}},
	"gpu_vasp": {Name: "gpu_vasp", PriorityTier: 10, Nodes: []string{"node1", "node2", "node3"}},
}

func job(id, name string, state slurm.JobState, node string) slurm.QueuedJob {
	return slurm.QueuedJob{ID: id, Name: name, State: state, NodeList: node, UID: owner, Partition: "gpu_ai",
		Submit: scaleNow.Add(-time.Minute), Reason: "None", Priority: 1}
}

func ready(id string, inFlight int) endpoints.Endpoint {
	n := inFlight
	return endpoints.Endpoint{Tier: "fast", JobID: id, State: endpoints.StateReady, InFlight: &n}
}

func TestDecideScale(t *testing.T) {
	tc := fastReplicas()
	kept := job("10", "llm-fast", slurm.JobRunning, "node1")
	extra := job("11", "llm-fast-extra", slurm.JobRunning, "node2")
	pendingExtra := job("12", "llm-fast-extra", slurm.JobPending, "")
	pendingExtra.Submit = scaleNow.Add(-5 * time.Second)
	staleExtra := pendingExtra
	staleExtra.Submit = scaleNow.Add(-time.Minute)
	member := job("20", "llm-reasoning", slurm.JobPending, "")
	member.Reason = "Resources"
	science := job("30", "vasp", slurm.JobPending, "")
	science.Reason, science.Partition, science.UID = "Resources", "gpu_vasp", 2000
	held := member
	held.Reason, held.Priority = "JobHeldAdmin", 0
	requeuedExtra := job("13", "llm-fast-extra", slurm.JobPending, "") // preempted: its supervisor requeued it
	requeuedExtra.Reason, requeuedExtra.Restarts, requeuedExtra.Submit = "BeginTime", 1, scaleNow
	requeuedKept := kept
	requeuedKept.State, requeuedKept.Reason, requeuedKept.Restarts = slurm.JobPending, "BeginTime", 1
	demandSince := scaleNow.Add(-10 * time.Second)
	two, one := 2, 1

	tests := []struct {
		name   string
		st     TierState
		f      ScaleFacts
		action ScaleAction
		cancel []string
		reason string
		since  time.Time
	}{
		{name: "scheduler error: nothing", f: ScaleFacts{Err: errors.New("squeue: timeout")}, action: ScaleUnknown, reason: "timeout"},
		{name: "idle: no demand", st: TierState{DemandSince: demandSince},
			f:      ScaleFacts{Jobs: []slurm.QueuedJob{kept}, Partitions: parts, Endpoints: []endpoints.Endpoint{ready("10", 2)}},
			action: ScaleNothing, reason: "2 in flight on 1 routed replicas (grows above 2 each)"},
		{name: "demand starts: the clock starts",
			f:      ScaleFacts{Jobs: []slurm.QueuedJob{kept}, Partitions: parts, Endpoints: []endpoints.Endpoint{ready("10", 3)}},
			action: ScaleNothing, reason: "grows after 5s", since: scaleNow},
		{name: "demand held: test a submit", st: TierState{DemandSince: demandSince},
			f:      ScaleFacts{Jobs: []slurm.QueuedJob{kept}, Partitions: parts, Endpoints: []endpoints.Endpoint{ready("10", 12)}},
			action: ScaleTest, reason: "growing to 2", since: demandSince},
		{name: "average over routed replicas", st: TierState{DemandSince: demandSince},
			f: ScaleFacts{Jobs: []slurm.QueuedJob{kept, extra}, Partitions: parts,
				Endpoints: []endpoints.Endpoint{ready("10", 2), ready("11", 2)}},
			action: ScaleNothing, reason: "4 in flight on 2 routed replicas"},
		{name: "a replica still loading: wait", st: TierState{DemandSince: demandSince},
			f:      ScaleFacts{Jobs: []slurm.QueuedJob{kept, extra}, Partitions: parts, Endpoints: []endpoints.Endpoint{ready("10", 12)}},
			action: ScaleNothing, reason: "1 of 2 running replicas routed", since: demandSince},
		{name: "a replica pending: wait", st: TierState{DemandSince: demandSince},
			f:      ScaleFacts{Jobs: []slurm.QueuedJob{kept, pendingExtra}, Partitions: parts, Endpoints: []endpoints.Endpoint{ready("10", 12)}},
			action: ScaleNothing, reason: "a replica is pending", since: demandSince},
		{name: "at max", st: TierState{DemandSince: demandSince, ScaleMax: &two},
			f: ScaleFacts{Jobs: []slurm.QueuedJob{kept, extra}, Partitions: parts,
				Endpoints: []endpoints.Endpoint{ready("10", 9), ready("11", 9)}},
			action: ScaleNothing, reason: "at max (2)", since: demandSince},
		{name: "above max after tier scale: newest extra cancelled", st: TierState{ScaleMax: &one},
			f:      ScaleFacts{Jobs: []slurm.QueuedJob{kept, extra}, Partitions: parts},
			action: ScaleCancel, cancel: []string{"11"}, reason: "2 replicas, max 1"},
		{name: "extra requeued (preempted): cancelled at once, even with demand; the kept one is not", st: TierState{DemandSince: demandSince},
			f:      ScaleFacts{Jobs: []slurm.QueuedJob{requeuedKept, extra, requeuedExtra}, Partitions: parts, Endpoints: []endpoints.Endpoint{ready("11", 12)}},
			action: ScaleCancel, cancel: []string{"13"}, reason: "extra replica 13 was requeued (preempted, or its node lost): an extra never runs again",
			since: demandSince},
		{name: "extra pending past start_timeout: cancelled",
			f:      ScaleFacts{Jobs: []slurm.QueuedJob{kept, staleExtra}, Partitions: parts},
			action: ScaleCancel, cancel: []string{"12"}, reason: "still pending 30s after its submit"},
		{name: "a reasoning member waits for the extra's node: it gives way",
			f:      ScaleFacts{Jobs: []slurm.QueuedJob{kept, extra, member}, Partitions: parts},
			action: ScaleCancel, cancel: []string{"11"}, reason: "job 20 (llm-reasoning, partition gpu_ai, Resources) is queued for node node2"},
		{name: "science (higher PriorityTier) waits: Slurm preempts, the keeper does not cancel",
			f:      ScaleFacts{Jobs: []slurm.QueuedJob{kept, extra, science}, Partitions: parts},
			action: ScaleNothing},
		{name: "a held job waits for nothing",
			f:      ScaleFacts{Jobs: []slurm.QueuedJob{kept, extra, held}, Partitions: parts},
			action: ScaleNothing},
		{name: "the tier's own kept job is never cancelled for room",
			f:      ScaleFacts{Jobs: []slurm.QueuedJob{kept, member}, Partitions: parts},
			action: ScaleNothing},
		{name: "another owner's job of the same name is not a replica", st: TierState{ScaleMax: &one},
			f: ScaleFacts{Jobs: []slurm.QueuedJob{kept, func() slurm.QueuedJob { j := extra; j.UID = 7; return j }()},
				Partitions: parts},
			action: ScaleNothing},
		{name: "hourly cap", st: TierState{DemandSince: demandSince, ExtraSubmits: repeat(scaleNow.Add(-time.Minute), 8)},
			f:      ScaleFacts{Jobs: []slurm.QueuedJob{kept}, Partitions: parts, Endpoints: []endpoints.Endpoint{ready("10", 12)}},
			action: ScaleNothing, reason: "8 extra replicas submitted in the last hour", since: demandSince},
		{name: "disabled: never grows", st: TierState{DemandSince: demandSince, Enabled: new(bool)},
			f:      ScaleFacts{Jobs: []slurm.QueuedJob{kept}, Partitions: parts, Endpoints: []endpoints.Endpoint{ready("10", 12)}},
			action: ScaleNothing, reason: "disabled by admin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := DecideScale(tc, tt.st, owner, tt.f, scaleNow)
			if d.Action != tt.action || !strings.Contains(d.Reason, tt.reason) || !cmp.Equal(d.Cancel, tt.cancel) {
				t.Errorf("got %s %v %q, want %s %v containing %q", d.Action, d.Cancel, d.Reason, tt.action, tt.cancel, tt.reason)
			}
			if tt.action != ScaleCancel && tt.action != ScaleUnknown && !d.DemandSince.Equal(tt.since) {
				t.Errorf("demand since %v, want %v", d.DemandSince, tt.since)
			}
		})
	}
}

func repeat(t time.Time, n int) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = t
	}
	return out
}

func TestGrowCheck(t *testing.T) {
	tc := fastReplicas()
	est := slurm.StartEstimate{JobID: "99", Start: scaleNow, Nodes: []string{"node2"}, Partition: "gpu_ai"}
	kept := job("10", "llm-fast", slurm.JobRunning, "node1")
	member := job("20", "llm-reasoning", slurm.JobPending, "")
	member.Reason = "Priority"
	f := ScaleFacts{Jobs: []slurm.QueuedJob{kept}, Partitions: parts}
	if why := GrowCheck(tc, owner, est, f, scaleNow); why != "" {
		t.Errorf("idle node2, nobody waiting: %q, want grow", why)
	}
	late := est
	late.Start = scaleNow.Add(time.Hour)
	if why := GrowCheck(tc, owner, late, f, scaleNow); !strings.Contains(why, "not now: no idle node") {
		t.Errorf("start in an hour: %q", why)
	}
	f.Jobs = append(f.Jobs, member)
	if why := GrowCheck(tc, owner, est, f, scaleNow); !strings.Contains(why, "job 20 (llm-reasoning, partition gpu_ai, Priority) is queued") {
		t.Errorf("a member waiting: %q", why)
	}
}

// scaleRig is a keeper of the fast tier with replicas over the fake
// scheduler (the local cluster's partitions) and an endpoint directory,
// with this process's uid as the jobs' owner.
func scaleRig(t *testing.T) (cfg Config, f *fakeSlurm, epDir string, uid uint32) {
	t.Helper()
	dir := t.TempDir()
	epDir = filepath.Join(dir, "endpoints")
	if err := os.MkdirAll(epDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg = Config{StateDir: filepath.Join(dir, "state"), LockTimeout: time.Second, EndpointDir: epDir,
		ScaleInterval: time.Second, Tiers: map[string]TierConfig{"fast": fastReplicas()}}
	f = newFakeSlurm()
	f.parts = parts
	return cfg, f, epDir, uint32(os.Getuid())
}

// TestScaleGrowsAndCancels runs Scale against the fake scheduler and an
// endpoint directory: demand held → sbatch --test-only → sbatch of an
// extra with --requeue and the idle exit; a scheduler error submits and
// cancels nothing.
func TestScaleGrowsAndCancels(t *testing.T) {
	cfg, f, epDir, uid := scaleRig(t)
	f.estimate = slurm.StartEstimate{JobID: "99", Start: scaleNow, Nodes: []string{"node2"}, Partition: "gpu_ai"}
	kept := job("10", "llm-fast", slurm.JobRunning, "node1")
	kept.UID = uid
	f.queued = []slurm.QueuedJob{kept}
	clk := &fakeClock{t: scaleNow}
	k := New(cfg, Options{Scheduler: f, Now: clk.now, Owner: &uid})
	writeEndpoint(t, epDir, "10", 9)

	if _, err := k.Scale(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(f.tested) != 0 {
		t.Fatalf("demand just began: tested %v", f.tested)
	}
	clk.advance(6 * time.Second)
	res, err := k.Scale(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(f.submits) != 1 || res[0].Submitted == "" {
		t.Fatalf("demand held 6 s: submits %v, result %+v", f.submits, res)
	}
	want := []string{"--job-name=llm-fast-extra", "--requeue", "--export=ALL,SLURM_LLM_IDLE_EXIT=300s"}
	if d := cmp.Diff(want, f.submits[0].Args); d != "" {
		t.Errorf("sbatch args (-want +got):\n%s", d)
	}
	st, _ := k.Store().Load("fast")
	if !st.DemandSince.IsZero() || len(st.ExtraSubmits) != 1 {
		t.Errorf("after the submit: state %+v", st)
	}

	// Scheduler down: a stale pending extra is not cancelled, nothing submitted.
	stale := job("11", "llm-fast-extra", slurm.JobPending, "")
	stale.UID, stale.Submit = uid, scaleNow.Add(-time.Hour)
	f.queued = []slurm.QueuedJob{kept, stale}
	f.queueErr = errors.New("squeue: Unable to contact slurm controller")
	if _, err := k.Scale(context.Background()); err == nil || len(f.cancelled) != 0 || len(f.submits) != 1 {
		t.Errorf("scheduler down: err %v, cancelled %v, submits %d", err, f.cancelled, len(f.submits))
	}
	f.queueErr = nil
	if _, err := k.Scale(context.Background()); err != nil || !cmp.Equal(f.cancelled, []string{"11"}) {
		t.Errorf("scheduler back: err %v, cancelled %v, want [11]", err, f.cancelled)
	}
}

func writeEndpoint(t *testing.T, dir, job string, inFlight int) {
	t.Helper()
	now := scaleNow
	n := inFlight
	e := endpoints.Endpoint{Schema: endpoints.SchemaVersion, Tier: "fast", JobID: job, Host: "node1", Port: 8080,
		State: endpoints.StateReady, Models: []string{"m"}, Node: "node1", PID: 1, StartedAt: now,
		Heartbeat: now, LeaseExpires: now.Add(time.Hour), RunID: "0123456789abcdef", InFlight: &n}
	if err := fsutil.WriteJSON(filepath.Join(dir, endpoints.FileName("fast", job)), e, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestScaleTierPersistsAndStatusShowsReplicas(t *testing.T) {
	cfg, f, epDir, uid := scaleRig(t)
	kept, extra := job("10", "llm-fast", slurm.JobRunning, "node1"), job("11", "llm-fast-extra", slurm.JobRunning, "node2")
	kept.UID, extra.UID = uid, uid
	f.queued = []slurm.QueuedJob{extra, kept}
	f.queue["llm-fast"] = []slurm.JobRef{{ID: "10", State: slurm.JobRunning}}
	k := New(cfg, Options{Scheduler: f, Now: func() time.Time { return scaleNow }, Owner: &uid})
	writeEndpoint(t, epDir, "10", 3)

	if err := k.ScaleTier(context.Background(), "fast", 2, -1); err != nil {
		t.Errorf("min 2, max 3 from the config: %v", err)
	}
	if err := k.ScaleTier(context.Background(), "fast", -1, 1); err == nil || !strings.Contains(err.Error(), "max 1: want min (2)") {
		t.Errorf("max below min: error %v", err)
	}
	if err := k.ScaleTier(context.Background(), "fast", 1, 2); err != nil {
		t.Fatal(err)
	}
	st, _ := k.Store().Load("fast")
	if st.ScaleMin == nil || *st.ScaleMin != 1 || st.ScaleMax == nil || *st.ScaleMax != 2 {
		t.Fatalf("state after tier scale: min %v max %v", st.ScaleMin, st.ScaleMax)
	}
	var b strings.Builder
	if err := WriteStatus(&b, k.Status(context.Background()), scaleNow, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fast: replicas min 1, max 2;", "10  kept   RUNNING  node1  ready  in flight 3",
		"11  extra  RUNNING  node2  -      in flight -"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
}

// TestCheckRoom: max replicas over the partition's nodes is a config error
// naming the file, line and key, found with what Slurm says (sbatch
// --test-only's partition and node count, the partition's nodes); `tier
// scale` refuses such a max; a scheduler error finds nothing.
func TestCheckRoom(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "k.toml")
	cfg, err := Parse(path, []byte(fmt.Sprintf(`state_dir = %q
endpoint_dir = %q
[tiers.fast]
script = "/s/fast.sbatch"
[tiers.fast.replicas]
min = 1
max = 4
`, filepath.Join(dir, "state"), dir)))
	if err != nil {
		t.Fatal(err)
	}
	f := newFakeSlurm()
	f.parts = parts
	f.estimate = slurm.StartEstimate{JobID: "99", Start: scaleNow, Nodes: []string{"node2"}, Partition: "gpu_ai"}
	k := New(cfg, Options{Scheduler: f, Now: func() time.Time { return scaleNow }})
	problems, err := k.CheckRoom(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := path + ":7: tiers.fast.replicas.max: 4 replicas of 1 node(s) each, but partition gpu_ai " +
		"(where sbatch --test-only puts them) has 3 nodes: want at most 3"
	if len(problems) != 1 || problems[0].Error() != want {
		t.Fatalf("problems %v, want [%s]", problems, want)
	}
	if len(f.tested) != 1 || !slices.Contains(f.tested[0].Args, "--job-name=llm-fast-extra") {
		t.Errorf("tested %+v: want one sbatch --test-only of an extra", f.tested)
	}

	if err := k.ScaleTier(context.Background(), "fast", -1, 5); err == nil || !strings.Contains(err.Error(), "max 5 set by `tier scale`") {
		t.Errorf("tier scale --max 5 on 3 nodes: %v", err)
	}
	if err := k.ScaleTier(context.Background(), "fast", -1, 3); err != nil {
		t.Fatalf("tier scale --max 3: %v", err)
	}
	if problems, err := k.CheckRoom(context.Background()); err != nil || len(problems) != 0 {
		t.Errorf("after tier scale --max 3: problems %v, error %v", problems, err)
	}

	f.estimate.Nodes = []string{"node1", "node2"} // a replica of two nodes: one fits, not three
	if problems, _ := k.CheckRoom(context.Background()); len(problems) != 1 || !strings.Contains(problems[0].Error(), "max 3 set by `tier scale`: 3 replicas of 2 node(s)") {
		t.Errorf("two-node replicas: problems %v", problems)
	}
	f.queueErr = slurm.ErrUnavailable
	if problems, err := k.CheckRoom(context.Background()); err == nil || len(problems) != 0 {
		t.Errorf("scheduler down: problems %v, error %v; want no problem and the error", problems, err)
	}
}
