package keeper

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"slurm-llm/slurm"
)

// requeued is tier fast's job 7, requeued at t0 (its SubmitTime: whole
// seconds) and held by Slurm until t0+121 s, as squeue -O shows it
// (slurm/FACTS.md R7); change edits the copy.
func requeued(change func(*slurm.QueuedJob)) slurm.QueuedJob {
	j := slurm.QueuedJob{ID: "7", State: slurm.JobPending, Reason: "BeginTime", Submit: t0,
		Eligible: t0.Add(121 * time.Second), Start: t0.Add(121 * time.Second), Priority: 4294900403,
		Restarts: 1, UID: 990, Partition: "gpu_ai", Name: "llm-fast"}
	if change != nil {
		change(&j)
	}
	return j
}

var testPolicy = ReleasePolicy{Delay: time.Second, RequeueHoldMax: 125 * time.Second}

func TestPlanReleases(t *testing.T) {
	unavailable := fmt.Errorf("queue: %w", slurm.ErrUnavailable)
	disabled := TierState{Enabled: boolPtr(false)}
	tests := []struct {
		name     string
		cfg      func(*TierConfig)
		st       TierState
		stErr    error
		job      slurm.QueuedJob
		schedErr error
		now      time.Time
		want     ReleaseDecision
	}{
		{name: "requeued, PENDING BeginTime, a second after the requeue: release", job: requeued(nil),
			now: t0.Add(time.Second), want: ReleaseDecision{Verdict: VerdictRelease}},
		{name: "long after the requeue: release", job: requeued(nil), now: t0.Add(100 * time.Second),
			want: ReleaseDecision{Verdict: VerdictRelease}},
		// The measured rule (FACTS R2): a release allocated in the requeue's
		// own second kills the job. SubmitTime has whole seconds, so the
		// requeue may have finished as late as t0+0.999.
		{name: "same second as the requeue (+0 ms): wait until the next second", job: requeued(nil), now: t0,
			want: ReleaseDecision{Verdict: VerdictWait, Until: t0.Add(time.Second)}},
		{name: "same second as the requeue (+999 ms): still wait", job: requeued(nil), now: t0.Add(999 * time.Millisecond),
			want: ReleaseDecision{Verdict: VerdictWait, Until: t0.Add(time.Second)}},
		{name: "clock behind Slurm's: wait", job: requeued(nil), now: t0.Add(-3 * time.Second),
			want: ReleaseDecision{Verdict: VerdictWait, Until: t0.Add(time.Second)}},
		{name: "still COMPLETING: a release would be undone", job: requeued(func(j *slurm.QueuedJob) {
			j.State, j.Reason, j.Submit, j.Eligible = slurm.JobCompleting, "None", t0.Add(-time.Hour), t0.Add(-time.Hour)
		}), now: t0.Add(time.Hour), want: ReleaseDecision{Verdict: VerdictLeave}},
		{name: "running: nothing to release", job: requeued(func(j *slurm.QueuedJob) { j.State, j.Reason = slurm.JobRunning, "None" }),
			now: t0.Add(time.Minute), want: ReleaseDecision{Verdict: VerdictLeave, Routine: true}},
		{name: "pending for resources (released already, or never held): nothing", job: requeued(func(j *slurm.QueuedJob) {
			j.Reason = "Resources"
		}), now: t0.Add(time.Minute), want: ReleaseDecision{Verdict: VerdictLeave, Routine: true}},
		{name: "held by an admin (JobHeldAdmin, priority 0): never", job: requeued(func(j *slurm.QueuedJob) {
			j.Reason, j.Priority = "JobHeldAdmin", 0
		}), now: t0.Add(time.Minute), want: ReleaseDecision{Verdict: VerdictLeave}},
		{name: "held by its owner: never", job: requeued(func(j *slurm.QueuedJob) { j.Reason, j.Priority = "JobHeldUser", 0 }),
			now: t0.Add(time.Minute), want: ReleaseDecision{Verdict: VerdictLeave}},
		{name: "requeue-held: never", job: requeued(func(j *slurm.QueuedJob) {
			j.Reason, j.Priority = "job_requeued_in_held_state", 0
		}), now: t0.Add(time.Minute), want: ReleaseDecision{Verdict: VerdictLeave}},
		{name: "priority 0 whatever the reason: held, never", job: requeued(func(j *slurm.QueuedJob) { j.Priority = 0 }),
			now: t0.Add(time.Minute), want: ReleaseDecision{Verdict: VerdictLeave}},
		{name: "tier disabled by an admin: never", st: disabled, job: requeued(nil), now: t0.Add(time.Minute),
			want: ReleaseDecision{Verdict: VerdictLeave}},
		{name: "tier disabled in the config: never", cfg: func(tc *TierConfig) { tc.Enabled = false }, job: requeued(nil),
			now: t0.Add(time.Minute), want: ReleaseDecision{Verdict: VerdictLeave}},
		{name: "release = false: never", cfg: func(tc *TierConfig) { tc.Release = false }, job: requeued(nil),
			now: t0.Add(time.Minute), want: ReleaseDecision{Verdict: VerdictLeave}},
		{name: "state unreadable: tier left alone", stErr: errors.New("bad json"), job: requeued(nil),
			now: t0.Add(time.Minute), want: ReleaseDecision{Verdict: VerdictLeave}},
		{name: "another owner's job of the tier's name: not the tier's", job: requeued(func(j *slurm.QueuedJob) { j.UID = 1001 }),
			now: t0.Add(time.Minute), want: ReleaseDecision{Verdict: VerdictLeave}},
		{name: "never requeued (a begin time given at submission): left alone", job: requeued(func(j *slurm.QueuedJob) { j.Restarts = 0 }),
			now: t0.Add(time.Minute), want: ReleaseDecision{Verdict: VerdictLeave}},
		{name: "begin time moved later by someone: left alone", job: requeued(func(j *slurm.QueuedJob) {
			j.Eligible = t0.Add(time.Hour)
		}), now: t0.Add(time.Minute), want: ReleaseDecision{Verdict: VerdictLeave}},
		{name: "submit time unknown: cannot tell when it is safe", job: requeued(func(j *slurm.QueuedJob) { j.Submit = time.Time{} }),
			now: t0.Add(time.Minute), want: ReleaseDecision{Verdict: VerdictLeave}},
		{name: "scheduler error: nothing released", job: requeued(nil), schedErr: unavailable, now: t0.Add(time.Minute),
			want: ReleaseDecision{Verdict: VerdictLeave}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := testTier()
			if tt.cfg != nil {
				tt.cfg(&tc)
			}
			cfg := Config{Tiers: map[string]TierConfig{tc.Name: tc}}
			var jobs []slurm.QueuedJob
			if tt.schedErr == nil {
				jobs = []slurm.QueuedJob{tt.job}
			}
			got := PlanReleases(cfg, testPolicy, map[string]TierState{"fast": tt.st}, map[string]error{"fast": tt.stErr},
				jobs, tt.schedErr, 990, tt.now)
			if len(got) != 1 {
				t.Fatalf("decisions %+v, want one", got)
			}
			if got[0].Reason == "" {
				t.Errorf("decision without a reason: %+v", got[0])
			}
			want := tt.want
			if tt.schedErr == nil {
				want.Tier, want.Job = "fast", "7"
			}
			want.Reason = got[0].Reason
			if d := cmp.Diff(want, got[0]); d != "" {
				t.Errorf("decision (-want +got):\n%s", d)
			}
		})
	}
}

func TestPlanReleasesForeignName(t *testing.T) {
	cfg := Config{Tiers: map[string]TierConfig{"fast": testTier()}}
	got := PlanReleases(cfg, testPolicy, nil, nil, []slurm.QueuedJob{requeued(func(j *slurm.QueuedJob) { j.Name = "vasp" })}, nil, 990, t0.Add(time.Minute))
	if len(got) != 1 || got[0].Verdict != VerdictLeave || got[0].Tier != "" {
		t.Errorf("a job of no tier's name: %+v, want left alone", got)
	}
}

// releaseKeeper is a keeper on the fake scheduler whose tier jobs belong
// to uid 990, with the release check on.
func releaseKeeper(t *testing.T) (*Keeper, *fakeSlurm, *fakeClock, *bytes.Buffer) {
	t.Helper()
	cfg := testConfig(t)
	cfg.ReleaseInterval, cfg.ReleaseDelay, cfg.RequeueHoldMax = time.Second, time.Second, 125*time.Second
	tc := cfg.Tiers["fast"]
	tc.Release = true
	cfg.Tiers["fast"] = tc
	f, clock, owner := newFakeSlurm(), &fakeClock{t: t0}, uint32(990)
	var logs bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	return New(cfg, Options{Scheduler: f, Log: log, Now: clock.now, Owner: &owner}), f, clock, &logs
}

func TestKeeperReleaseCheck(t *testing.T) {
	k, f, clock, logs := releaseKeeper(t)
	rl := &releaseLog{log: k.log}
	f.queued = []slurm.QueuedJob{requeued(nil)}

	res := k.Release(context.Background()) // t0: the requeue's second
	rl.record(res)
	if len(f.released) != 0 || !res.Next.Equal(t0.Add(time.Second)) {
		t.Fatalf("in the requeue's second: released %v, next check %s; want none, at t0+1s", f.released, res.Next)
	}
	if q := f.queries[0]; len(q.Names) != 1 || q.Names[0] != "llm-fast" || q.User != "990" || len(q.States) != 0 {
		t.Errorf("squeue query %+v, want the tier's job name, of the keeper's account only (-u 990)", q)
	}
	clock.advance(300 * time.Millisecond)
	rl.record(k.Release(context.Background())) // same verdict: not logged again
	clock.advance(700 * time.Millisecond)
	res = k.Release(context.Background())
	rl.record(res)
	if d := cmp.Diff([]string{"7"}, f.released); d != "" {
		t.Errorf("released (-want +got):\n%s", d)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "not released yet") || !strings.Contains(lines[1], "released requeued job") {
		t.Errorf("log lines %q, want one 'not released yet' and one 'released'", lines)
	}
}

func TestKeeperReleaseSchedulerDown(t *testing.T) {
	k, f, clock, logs := releaseKeeper(t)
	clock.advance(time.Minute)
	rl := &releaseLog{log: k.log}
	f.queueErr = fmt.Errorf("queue: %w", slurm.ErrUnavailable)
	for i := 0; i < 3; i++ {
		res := k.Release(context.Background())
		rl.record(res)
		if res.ListErr == nil || len(f.released) != 0 {
			t.Fatalf("scheduler down: %+v, released %v", res, f.released)
		}
	}
	f.queueErr = nil
	f.queued = []slurm.QueuedJob{requeued(nil)}
	f.releaseErr = fmt.Errorf("release job 7: %w", slurm.ErrUnavailable)
	res := k.Release(context.Background())
	rl.record(res)
	if res.Err == nil || res.Decisions[0].Verdict != VerdictLeave {
		t.Errorf("a release that failed: %+v", res)
	}
	text := logs.String()
	if strings.Count(text, "nothing released") != 1 || !strings.Contains(text, "scheduler answers again") ||
		!strings.Contains(text, "release failed") {
		t.Errorf("log:\n%s\nwant the outage once, its end, and the failed release", text)
	}
}

// Run checks for releases between passes, at once when a job becomes safe.
func TestRunReleasesBetweenPasses(t *testing.T) {
	cfg := testConfig(t)
	cfg.ReleaseInterval, cfg.ReleaseDelay, cfg.RequeueHoldMax = 20*time.Millisecond, time.Second, 125*time.Second
	tc := cfg.Tiers["fast"]
	tc.Release = true
	cfg.Tiers["fast"] = tc
	f, owner := newFakeSlurm(), uint32(990)
	f.queued = []slurm.QueuedJob{requeued(func(j *slurm.QueuedJob) { j.Submit = time.Now().Add(-2 * time.Second).Truncate(time.Second) })}
	k := New(cfg, Options{Scheduler: f, Owner: &owner})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.onQueue = func() { // called from Run's goroutine
		if len(f.queries) == 3 {
			cancel()
		}
	}
	timeout := time.AfterFunc(10*time.Second, cancel)
	defer timeout.Stop()
	if err := k.Run(ctx, RunOptions{Interval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if len(f.queries) < 3 {
		t.Errorf("release checks %d in 10 s, want 3 (every 20 ms)", len(f.queries))
	}
	if len(f.released) == 0 || f.released[0] != "7" {
		t.Errorf("released %v, want job 7", f.released)
	}
}

// TestPlanReleasesRequeueHoldAcrossVersions pins how the release check
// reads the hold Slurm puts on a requeued job. batch_requeue_fini
// (src/slurmctld/job_mgr.c) sets begin_time = now + D + 1 and submit_time =
// now (now + 1 when that equals the old submit time), so EligibleTime −
// SubmitTime is D + 1 (or D). D is the credential lifetime (AuthInfo
// cred_expire, default 120) in 20.11 to 25.05 (slurm-20-11-9-1 …
// slurm-25-05-8-1); 25.11 (slurm-25-11-7-1, _requeue_delay) takes
// SchedulerParameters=requeue_delay=N first and cred_expire otherwise. The
// squeue line is the same (PENDING, BeginTime); only the gap differs. A gap
// up to requeue_hold_max (125 s by default) is Slurm's hold and is
// released; a site with D above 124 s sees its requeued jobs left alone as
// "deferred by someone" unless requeue_hold_max is raised to D + 1 s.
func TestPlanReleasesRequeueHoldAcrossVersions(t *testing.T) {
	tests := []struct {
		name    string
		hold    time.Duration // EligibleTime − SubmitTime
		holdMax time.Duration
		want    ReleaseVerdict
	}{
		{name: "20.11-25.05, cred_expire default: 121 s", hold: 121 * time.Second, want: VerdictRelease},
		{name: "25.11, no requeue_delay: cred_expire, 121 s", hold: 121 * time.Second, want: VerdictRelease},
		{name: "25.11, requeue_delay=30: 31 s", hold: 31 * time.Second, want: VerdictRelease},
		{name: "25.11, requeue_delay=0, submit bumped a second: 0 s", hold: 0, want: VerdictRelease},
		{name: "25.11, requeue_delay=600: 601 s, beyond requeue_hold_max: left alone", hold: 601 * time.Second, want: VerdictLeave},
		{name: "25.11, requeue_delay=600, requeue_hold_max raised to 605 s", hold: 601 * time.Second,
			holdMax: 605 * time.Second, want: VerdictRelease},
		{name: "any version, cred_expire=300: 301 s, left alone", hold: 301 * time.Second, want: VerdictLeave},
	}
	cfg := Config{Tiers: map[string]TierConfig{"fast": testTier()}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testPolicy
			if tt.holdMax > 0 {
				p.RequeueHoldMax = tt.holdMax
			}
			job := requeued(func(j *slurm.QueuedJob) { j.Eligible, j.Start = t0.Add(tt.hold), t0.Add(tt.hold) })
			got := PlanReleases(cfg, p, nil, nil, []slurm.QueuedJob{job}, nil, 990, t0.Add(2*time.Second))
			if len(got) != 1 || got[0].Verdict != tt.want {
				t.Errorf("hold %s, requeue_hold_max %s: %+v, want %s", tt.hold, p.RequeueHoldMax, got, tt.want)
			}
		})
	}
}

// showConfig is `scontrol show config` as 20.11 to 25.11 print it
// ("%-23s = %s", src/api/config_info.c), cut to the keys that matter.
func showConfig(version, authInfo, schedParams string) string {
	var b strings.Builder
	b.WriteString("Configuration data as of 2026-11-27T10:00:00\n")
	for _, kv := range [][2]string{{"AuthInfo", authInfo}, {"ClusterName", "test"},
		{"SchedulerParameters", schedParams}, {"SLURM_VERSION", version}} {
		fmt.Fprintf(&b, "%-23s = %s\n", kv[0], kv[1])
	}
	return b.String() + "\nSlurmctld(primary) at head is UP\n"
}

// TestCheckRequeueHoldAcrossVersions pins the site whose requeued tier
// jobs waited the whole hold: cred_expire (or 25.11's requeue_delay)
// above 124 s against the default requeue_hold_max of 125 s. The check
// reads D from each series' `scontrol show config` and says what to set.
func TestCheckRequeueHoldAcrossVersions(t *testing.T) {
	tests := []struct {
		name, version, authInfo, schedParams string
		holdMax                              time.Duration
		wantSet                              string // "" when no problem
	}{
		{name: "20.11, defaults", version: "20.11.9", authInfo: "(null)", schedParams: "(null)", holdMax: 125 * time.Second},
		{name: "22.05, cred_expire=124: 125 s, covered", version: "22.05.8", authInfo: "cred_expire=124", schedParams: "(null)", holdMax: 125 * time.Second},
		{name: "22.05, cred_expire=300", version: "22.05.8", authInfo: "cred_expire=300", schedParams: "(null)",
			holdMax: 125 * time.Second, wantSet: "5m1s"},
		{name: "23.11, cred_expire=300, raised to 301 s", version: "23.11.11", authInfo: "cred_expire=300", schedParams: "(null)", holdMax: 301 * time.Second},
		{name: "24.11, requeue_delay not read before 25.11", version: "24.11.7", authInfo: "(null)", schedParams: "requeue_delay=600", holdMax: 125 * time.Second},
		{name: "25.05, requeue_delay not read before 25.11", version: "25.05.8", authInfo: "(null)", schedParams: "requeue_delay=600", holdMax: 125 * time.Second},
		{name: "25.11, requeue_delay=600", version: "25.11.7", authInfo: "(null)", schedParams: "bf_interval=30,requeue_delay=600",
			holdMax: 125 * time.Second, wantSet: "10m1s"},
		{name: "25.11, requeue_delay=30 under cred_expire=300", version: "25.11.7", authInfo: "cred_expire=300", schedParams: "requeue_delay=30", holdMax: 125 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := slurm.ParseConfig(showConfig(tt.version, tt.authInfo, tt.schedParams))
			if err != nil {
				t.Fatal(err)
			}
			k, f, _, _ := releaseKeeper(t)
			k.cfg.RequeueHoldMax = tt.holdMax
			f.config = c
			problem, err := k.CheckRequeueHold(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.wantSet == "" && problem != nil:
				t.Errorf("problem %q, want none", problem)
			case tt.wantSet != "" && (problem == nil || !strings.Contains(problem.Error(), fmt.Sprintf("set requeue_hold_max = %q", tt.wantSet))):
				t.Errorf("problem %v, want one saying requeue_hold_max = %q", problem, tt.wantSet)
			}
		})
	}
}

func TestCheckRequeueHoldAsksOnlyWhenReleasing(t *testing.T) {
	k, f, _, _ := releaseKeeper(t)
	f.config, _ = slurm.ParseConfig(showConfig("25.11.7", "(null)", "requeue_delay=600"))
	tc := k.cfg.Tiers["fast"]
	tc.Release = false
	k.cfg.Tiers["fast"] = tc
	if problem, err := k.CheckRequeueHold(context.Background()); problem != nil || err != nil {
		t.Errorf("no tier releases: %v, %v; want nothing", problem, err)
	}
	tc.Release = true
	k.cfg.Tiers["fast"] = tc
	f.queueErr = fmt.Errorf("squeue: %w", slurm.ErrUnavailable)
	if _, err := k.CheckRequeueHold(context.Background()); !errors.Is(err, slurm.ErrUnavailable) {
		t.Errorf("scontrol unavailable: %v, want an error wrapping ErrUnavailable", err)
	}
}
