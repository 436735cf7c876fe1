package keeper

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseDefaults(t *testing.T) {
	cfg, err := Parse("k.toml", []byte(`
state_dir = "/var/lib/k"
[tiers.fast]
script = "/s/fast.sbatch"
[tiers.big]
job_name = "llm-big-one"
script = "/s/big.sbatch"
sbatch_args = ["--partition=gpu_ai"]
enabled = false
backoff_initial = "10s"
backoff_max = "5m"
backoff_factor = 3.0
healthy_reset = "1m"
max_submits_per_hour = 9
release = false
members = 3
`))
	if err != nil {
		t.Fatal(err)
	}
	fast := DefaultTier
	fast.Name, fast.JobName, fast.Script = "fast", "llm-fast", "/s/fast.sbatch"
	want := Config{StateDir: "/var/lib/k", LockTimeout: DefaultLockTimeout, SchedulerTimeout: DefaultSchedulerTimeout,
		ReleaseInterval: time.Second, ReleaseDelay: time.Second, RequeueHoldMax: 125 * time.Second,
		ScaleInterval: DefaultScaleInterval, Path: "k.toml", Tiers: map[string]TierConfig{
			"fast": fast,
			"big": {Name: "big", JobName: "llm-big-one", Script: "/s/big.sbatch", SbatchArgs: []string{"--partition=gpu_ai"},
				BackoffInitial: 10 * time.Second, BackoffMax: 5 * time.Minute, BackoffFactor: 3,
				HealthyReset: time.Minute, MaxSubmitsPerHour: 9, Members: 3},
		}}
	if d := cmp.Diff(want, cfg); d != "" {
		t.Errorf("Parse (-want +got):\n%s", d)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		toml string
		want []string // each line of the error, in order
	}{
		{name: "unknown keys, top level and in a tier", toml: `state_dir = "/k"
statedir = "/k"
[tiers.fast]
script = "/s"
backof_max = "1h"
`, want: []string{"k.toml:2: statedir: unknown key", "k.toml:5: tiers.fast.backof_max: unknown key"}},
		{name: "unknown table", toml: `state_dir = "/k"
[tiers.fast]
script = "/s"
[tier.slow]
script = "/s"
`, want: []string{"k.toml:4: tier: unknown key"}},
		{name: "bad values, with lines; a missing key has its table's, or none", toml: `lock_timeout = "0s"
[tiers.fast]
job_name = "a,b"
sbatch_args = ["-p", "x", "--job-name=y"]
backoff_initial = "2m"
backoff_max = "1m"
backoff_factor = 0.5
max_submits_per_hour = 0
members = 65
`, want: []string{
			"k.toml: state_dir: want an absolute path",
			"k.toml:1: lock_timeout: want a positive duration",
			"k.toml:2: tiers.fast.script: want the absolute path of an sbatch script",
			"k.toml:3: tiers.fast.job_name: want a name without commas, quotes or white space (squeue -n takes a list)",
			"k.toml:4: tiers.fast.sbatch_args: set the job name with job_name, not --job-name=y",
			"k.toml:6: tiers.fast.backoff_max: want at least backoff_initial (2m0s)",
			"k.toml:7: tiers.fast.backoff_factor: want a number ≥ 1",
			"k.toml:8: tiers.fast.max_submits_per_hour: want at least 1",
			"k.toml:9: tiers.fast.members: want 1 (a tier that is one job) up to 64 (an elastic tier's members)",
		}},
		{name: "release: a delay under a second kills jobs", toml: `state_dir = "/k"
release_delay = "500ms"
release_interval = "0s"
requeue_hold_max = "-1s"
[tiers.fast]
script = "/s"
release = "yes"
`, want: []string{
			`k.toml:2: release_delay: want whole seconds, at least "1s": a release in the requeue's own second kills the job`,
			"k.toml:3: release_interval: want a positive duration",
			"k.toml:4: requeue_hold_max: want a positive duration",
			"k.toml:7: tiers.fast.release: must be a boolean (got string)",
		}},
		{name: "no tiers", toml: `state_dir = "/k"`, want: []string{"k.toml: tiers: want at least one [tiers.NAME] table"}},
		{name: "metrics listen without a port", toml: `state_dir = "/k"
[metrics]
listen = "127.0.0.1"
[tiers.a]
script = "/s"
`, want: []string{`k.toml:3: metrics.listen: want host:port ("127.0.0.1:9466"): address 127.0.0.1: missing port in address`}},
		{name: "two tiers, one job name", toml: `state_dir = "/k"
[tiers.a]
script = "/s"
job_name = "same"
[tiers.b]
script = "/s"
job_name = "same"
`, want: []string{`k.toml:7: tiers.b.job_name: "same" is also tier a's job name`}},
		{name: "bad tier name", toml: `state_dir = "/k"
[tiers.Fast]
script = "/s"
`, want: []string{`k.toml:2: tiers.Fast: tier "Fast": want 1-32 characters of [a-z0-9_-]`}},
		{name: "a duration as a number", toml: `state_dir = "/k"
[tiers.fast]
script = "/s"
healthy_reset = 5
`, want: []string{`k.toml:4: tiers.fast.healthy_reset: must be a duration string like "30s" (got integer)`}},
		{name: "a value of the wrong type", toml: `state_dir = "/k"
[tiers.fast]
script = "/s"
enabled = "yes"
`, want: []string{`k.toml:4: tiers.fast.enabled: must be a boolean (got string)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("k.toml", []byte(tt.toml))
			if err == nil {
				t.Fatal("Parse: no error")
			}
			got := strings.Split(strings.TrimPrefix(err.Error(), "load keeper config: "), "\n")
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("error lines (-want +got):\n%s", d)
			}
		})
	}
}

// The shipped example must load, so that the docs in it stay true.
func TestShippedConfigLoads(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "..", "etc", "keeper.toml")
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"fast", "reasoning"}, cfg.TierNames()); d != "" {
		t.Errorf("tiers (-want +got):\n%s", d)
	}
	for _, name := range cfg.TierNames() {
		if _, err := os.Stat(filepath.Join(filepath.Dir(file), "..", "..", "scripts", "sbatch", name+".sbatch")); err != nil {
			t.Errorf("tier %s has no sbatch script in scripts/sbatch: %v", name, err)
		}
	}
}

func TestCheckSubmitUser(t *testing.T) {
	me := os.Getuid()
	tests := []struct {
		name     string
		submitAs string
		uid      int
		wrong    bool // ErrWrongUser
		err      bool // any error
	}{
		{name: "unset: anyone", submitAs: "", uid: me},
		{name: "own uid", submitAs: strconv.Itoa(me), uid: me},
		{name: "another uid", submitAs: strconv.Itoa(me + 1), uid: me, wrong: true, err: true},
		{name: "root by name, as root", submitAs: "root", uid: 0},
		{name: "root by name, as someone else", submitAs: "root", uid: 12345, wrong: true, err: true},
		{name: "no such user", submitAs: "no-such-user-slurm-llm", uid: me, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{SubmitAs: tt.submitAs}
			err := cfg.CheckSubmitUser(tt.uid)
			if (err != nil) != tt.err || errors.Is(err, ErrWrongUser) != tt.wrong {
				t.Errorf("CheckSubmitUser(%d) with submit_as %q = %v", tt.uid, tt.submitAs, err)
			}
		})
	}
}

func TestParseReplicas(t *testing.T) {
	cfg, err := Parse("k.toml", []byte(`
state_dir = "/var/lib/k"
endpoint_dir = "/e"
[tiers.fast]
script = "/s/fast.sbatch"
[tiers.fast.replicas]
min = 1
max = 3
extra_sbatch_args = ["--exclusive"]
[tiers.code]
script = "/s/code.sbatch"
[tiers.code.replicas]
min = 2
max = 2
in_flight_per_replica = 8
grow_after = "0s"
idle_after = "1m"
start_timeout = "10s"
extra_job_name = "code-more"
`))
	if err != nil {
		t.Fatal(err)
	}
	fast := cfg.Tiers["fast"]
	want := DefaultReplicas
	want.Max, want.ExtraJobName, want.ExtraSbatchArgs, want.MaxLine = 3, "llm-fast-extra", []string{"--exclusive"}, 8
	if d := cmp.Diff(want, fast.Replicas); d != "" || fast.Members != 1 || !fast.Replicas.Grows() {
		t.Errorf("fast: members %d, replicas (-want +got):\n%s", fast.Members, d)
	}
	code := cfg.Tiers["code"]
	want = Replicas{Min: 2, Max: 2, InFlightPerReplica: 8, IdleAfter: time.Minute, StartTimeout: 10 * time.Second, ExtraJobName: "code-more", MaxLine: 14}
	if d := cmp.Diff(want, code.Replicas); d != "" || code.Members != 2 || code.Replicas.Grows() {
		t.Errorf("code: members %d, replicas (-want +got):\n%s", code.Members, d)
	}
	args := ExtraSbatchArgs(fast, fast.Replicas)
	wantArgs := []string{"--job-name=llm-fast-extra", "--exclusive", "--requeue", "--export=ALL,SLURM_LLM_IDLE_EXIT=300s"}
	if d := cmp.Diff(wantArgs, args); d != "" {
		t.Errorf("extra sbatch args (-want +got):\n%s", d)
	}
}

func TestParseReplicasErrors(t *testing.T) {
	_, err := Parse("k.toml", []byte(`state_dir = "/k"
[tiers.fast]
script = "/s/f"
members = 2
[tiers.fast.replicas]
min = 2
max = 1
in_flight_per_replica = 0
idle_after = "0s"
extra_job_name = "llm-fast"
extra_sbatch_args = ["--requeue"]
[tiers.b]
script = "/s/b"
[tiers.b.replicas]
min = 1
[tiers.c]
script = "/s/c"
replicas = { max = 2 }
`))
	want := []string{
		"k.toml: endpoint_dir: want the absolute path of the endpoint directory: tier c has replicas, which grow with the requests in flight their endpoint files show",
		"k.toml:4: tiers.fast.members: a tier with [tiers.fast.replicas] is kept queued by its min; members is for elastic tiers",
		"k.toml:7: tiers.fast.replicas.max: want at least min (2)",
		"k.toml:8: tiers.fast.replicas.in_flight_per_replica: want at least 1",
		`k.toml:9: tiers.fast.replicas.idle_after: want at least "1s"`,
		"k.toml:10: tiers.fast.replicas.extra_job_name: want a name without commas, quotes or white space, other than job_name",
		"k.toml:11: tiers.fast.replicas.extra_sbatch_args: --requeue is set by the keeper (extra_job_name, --requeue)",
		"k.toml:14: tiers.b.replicas: want max: the most replicas that run at once",
	}
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
}
