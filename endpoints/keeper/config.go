package keeper

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/tomlconf"
)

// Config is the content of keeper.toml (etc/keeper.toml documents every
// key). Load fills defaults and validates; the zero value is not usable.
type Config struct {
	// StateDir holds one state file per tier (<tier>.json) and the lock.
	StateDir string
	// LockTimeout bounds the wait for another keeper process's pass or an
	// admin command holding the lock.
	LockTimeout time.Duration
	// SchedulerTimeout bounds each squeue, sbatch and scancel call; a call
	// that times out is "unknown", never "no job".
	SchedulerTimeout time.Duration
	// SubmitAs names the account (user name or uid) that keep passes must
	// run as, because sbatch submits the tiers' jobs as the caller; "" means
	// any. See CheckSubmitUser.
	SubmitAs string
	// ReleaseInterval is how often `keep --interval` checks for requeued
	// jobs to release (one squeue call for every tier); 0 means never
	// (`keep --once` never checks).
	ReleaseInterval time.Duration
	// ReleaseDelay is how long after a requeue (the job's SubmitTime,
	// whole seconds) its job is released; at least 1 s: a release in the
	// requeue's own second kills the job (slurm/FACTS.md R2).
	ReleaseDelay time.Duration
	// RequeueHoldMax is the longest begin time after a requeue that is
	// Slurm's own hold (121 s measured); a job whose begin time is further
	// out was deferred by someone and is not released.
	RequeueHoldMax time.Duration
	// EndpointDir is the shared directory the tiers' endpoint files are in
	// (llm-upstreams.toml's endpoint_dir): the scale check reads each
	// replica's requests in flight from them. Required when a tier has
	// [replicas] with max above min.
	EndpointDir string
	// ScaleInterval is how often `keep --interval` runs the scale check of
	// the tiers with replicas (one squeue and one scontrol call, the
	// endpoint files, an sbatch --test-only when growing).
	ScaleInterval time.Duration
	// MetricsListen is the HTTP address `keep --interval` serves /metrics
	// on ([metrics] listen, "127.0.0.1:9466"); "" means none.
	MetricsListen string
	// Tiers maps tier name to its settings.
	Tiers map[string]TierConfig
	// Path is the file Load read.
	Path string
}

// TierConfig is how one tier is kept queued. Parse starts each tier from
// DefaultTier, so a key left out keeps its default.
type TierConfig struct {
	// Name is the tier's name, the key of its [tiers.NAME] table.
	Name string
	// JobName is the Slurm job name the tier's job carries; the keeper
	// finds the job by it and passes --job-name=JobName to sbatch, so it
	// wins over the script's #SBATCH line. Default "llm-<tier>".
	JobName string
	// Script is the absolute path of the tier's sbatch script.
	Script string
	// SbatchArgs are extra sbatch options (argv, no shell), given before
	// the script.
	SbatchArgs []string
	// Enabled is whether the tier is kept queued while no admin has run
	// `tier enable` or `tier disable` on it.
	Enabled bool
	// BackoffInitial is the wait before resubmitting after one unhealthy
	// submit; each further one multiplies it by BackoffFactor, up to
	// BackoffMax.
	BackoffInitial time.Duration
	// BackoffMax caps the wait.
	BackoffMax time.Duration
	// BackoffFactor multiplies the wait per unhealthy submit (≥ 1).
	BackoffFactor float64
	// HealthyReset is how long the tier's job must be seen RUNNING for its
	// submits to count as healthy again (the backoff goes back to none).
	HealthyReset time.Duration
	// MaxSubmitsPerHour caps submissions in any sliding hour, whatever the
	// backoff says (≥ 1).
	MaxSubmitsPerHour int
	// Release is whether the tier's requeued job is released as soon as it
	// is safe, instead of waiting out Slurm's ~120 s hold.
	Release bool
	// Members is how many jobs of the tier are kept queued at once: 1 for
	// a tier that is one job, the [elastic] members of an elastic tier
	// (each member a one-node job running its own supervisor), or the
	// replicas' min.
	Members int
	// Replicas is how the tier grows onto idle nodes; the zero value (no
	// [tiers.NAME.replicas] table) never grows.
	Replicas Replicas
}

// Replicas is [tiers.NAME.replicas]: a tier of Min jobs kept queued (as
// members, requeued when preempted) and up to Max-Min extra jobs, each its
// own replica on its own node, submitted only while the tier has demand and
// Slurm can start them at once without delaying anyone, never run again
// once preempted (requeued, then cancelled by the scale check), and
// ending by themselves once idle.
type Replicas struct {
	// Min is how many replicas are kept queued (Members); Max the most
	// that run at once. Max 0 means no replicas table.
	Min, Max int
	// InFlightPerReplica: the tier has demand while its routed replicas
	// have more requests in flight than this many each, on average.
	InFlightPerReplica int
	// GrowAfter is how long the demand must last before an extra replica
	// is submitted (one per scale check).
	GrowAfter time.Duration
	// IdleAfter is how long an extra replica runs with no request in
	// flight before it drains and ends (its supervisor, SLURM_LLM_IDLE_EXIT).
	IdleAfter time.Duration
	// StartTimeout: an extra replica still pending this long after its
	// submit is cancelled (Slurm could not start it at once after all; a
	// pending extra would take a node someone else may want).
	StartTimeout time.Duration
	// ExtraJobName is the extra replicas' job name; default <job_name>-extra.
	ExtraJobName string
	// ExtraSbatchArgs are given to the extra replicas' sbatch after the
	// tier's sbatch_args (and --requeue, --export).
	ExtraSbatchArgs []string
	// MaxLine is the line of max in the file, for CheckRoom's error (which
	// needs Slurm, so comes after Load).
	MaxLine int
}

// Grows reports whether the tier may run extra replicas.
func (r Replicas) Grows() bool { return r.Max > r.Min }

// DefaultReplicas holds the defaults of [tiers.NAME.replicas].
var DefaultReplicas = Replicas{Min: 1, InFlightPerReplica: 2, GrowAfter: 5 * time.Second,
	IdleAfter: 5 * time.Minute, StartTimeout: 30 * time.Second}

// DefaultTier holds the defaults of every tier key but job_name (which
// defaults to "llm-<tier>") and script (required).
var DefaultTier = TierConfig{
	Enabled:           true,
	BackoffInitial:    time.Minute,
	BackoffMax:        time.Hour,
	BackoffFactor:     2,
	HealthyReset:      15 * time.Minute,
	MaxSubmitsPerHour: 4,
	Release:           true,
	Members:           1,
}

// Defaults of the top-level keys but state_dir (required).
const (
	DefaultLockTimeout      = 60 * time.Second
	DefaultSchedulerTimeout = 10 * time.Second
	DefaultReleaseInterval  = time.Second
	DefaultReleaseDelay     = time.Second
	DefaultRequeueHoldMax   = 125 * time.Second
	DefaultScaleInterval    = 2 * time.Second
)

// Load reads and validates a keeper config file.
func Load(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("load keeper config: %w", err)
	}
	return Parse(path, b)
}

// Parse is Load on bytes already read; path names the file in errors. It
// uses the loader every config shares (tomlconf): every problem is
// reported, each as "FILE:LINE: KEY: what is wrong" (no line when the key
// is missing), unknown keys are problems, and a duration is a string.
func Parse(path string, b []byte) (Config, error) {
	cfg := Config{LockTimeout: DefaultLockTimeout, SchedulerTimeout: DefaultSchedulerTimeout, Path: path,
		ReleaseInterval: DefaultReleaseInterval, ReleaseDelay: DefaultReleaseDelay, RequeueHoldMax: DefaultRequeueHoldMax,
		ScaleInterval: DefaultScaleInterval, Tiers: map[string]TierConfig{}}
	err := tomlconf.Decode(path, b, cfg.decode, cfg.validate)
	if err != nil {
		return Config{}, fmt.Errorf("load keeper config: %w", err)
	}
	return cfg, nil
}

// decode declares the file's keys (etc/keeper.toml documents them).
func (c *Config) decode(d *tomlconf.Decoder) {
	d.Root(map[string]tomlconf.Field{
		"state_dir":         d.String(&c.StateDir),
		"lock_timeout":      d.Duration(&c.LockTimeout),
		"scheduler_timeout": d.Duration(&c.SchedulerTimeout),
		"submit_as":         d.String(&c.SubmitAs),
		"release_interval":  d.Duration(&c.ReleaseInterval),
		"release_delay":     d.Duration(&c.ReleaseDelay),
		"requeue_hold_max":  d.Duration(&c.RequeueHoldMax),
		"endpoint_dir":      d.String(&c.EndpointDir),
		"scale_interval":    d.Duration(&c.ScaleInterval),
		"metrics":           d.TableField(map[string]tomlconf.Field{"listen": d.String(&c.MetricsListen)}),
		"tiers":             d.Each(func(name string) tomlconf.Field { return c.decodeTier(d, name) }),
	})
}

// decodeTier is the field of [tiers.NAME]: DefaultTier with the keys the
// file sets.
func (c *Config) decodeTier(d *tomlconf.Decoder, name string) tomlconf.Field {
	return func(key toml.Key, v any) {
		tc := DefaultTier
		tc.Name, tc.JobName, tc.SbatchArgs = name, "llm-"+name, nil
		d.Table(key, v, map[string]tomlconf.Field{
			"job_name":             d.String(&tc.JobName),
			"script":               d.String(&tc.Script),
			"sbatch_args":          d.Strings(&tc.SbatchArgs),
			"enabled":              d.Bool(&tc.Enabled),
			"backoff_initial":      d.Duration(&tc.BackoffInitial),
			"backoff_max":          d.Duration(&tc.BackoffMax),
			"backoff_factor":       d.Number(&tc.BackoffFactor),
			"healthy_reset":        d.Duration(&tc.HealthyReset),
			"max_submits_per_hour": d.Int(&tc.MaxSubmitsPerHour),
			"release":              d.Bool(&tc.Release),
			"members":              d.Int(&tc.Members),
			"replicas":             c.decodeReplicas(d, &tc.Replicas),
		}, nil)
		if tc.Replicas.Max > 0 {
			if d.IsDefined("tiers", name, "members") {
				d.Invalid(toml.Key{"tiers", name, "members"}, "a tier with [tiers.%s.replicas] is kept queued by its min; members is for elastic tiers", name)
			}
			tc.Members = tc.Replicas.Min
			if tc.Replicas.ExtraJobName == "" {
				tc.Replicas.ExtraJobName = tc.JobName + "-extra"
			}
		}
		c.Tiers[name] = tc
	}
}

// decodeReplicas is the field of [tiers.NAME.replicas]: DefaultReplicas
// with the keys the file sets; max is required.
func (c *Config) decodeReplicas(d *tomlconf.Decoder, dst *Replicas) tomlconf.Field {
	return func(key toml.Key, v any) {
		r := DefaultReplicas
		d.Table(key, v, map[string]tomlconf.Field{
			"min":                   d.Int(&r.Min),
			"max":                   d.Int(&r.Max),
			"in_flight_per_replica": d.Int(&r.InFlightPerReplica),
			"grow_after":            d.Duration(&r.GrowAfter),
			"idle_after":            d.Duration(&r.IdleAfter),
			"start_timeout":         d.Duration(&r.StartTimeout),
			"extra_job_name":        d.String(&r.ExtraJobName),
			"extra_sbatch_args":     d.Strings(&r.ExtraSbatchArgs),
		}, nil)
		r.MaxLine = d.Doc().Line(append(append(toml.Key{}, key...), "max"))
		if !d.IsDefined(append(key, "max")...) {
			d.Invalid(key, "want max: the most replicas that run at once")
			r.Max = max(r.Min, 1)
		}
		*dst = r
	}
}

// validate checks what decoding could not.
func (c *Config) validate(d *tomlconf.Decoder) {
	if len(c.Tiers) == 0 {
		d.Invalid(toml.Key{"tiers"}, "want at least one [tiers.NAME] table")
	}
	if c.StateDir == "" || !filepath.IsAbs(c.StateDir) {
		d.Invalid(toml.Key{"state_dir"}, "want an absolute path")
	}
	if c.LockTimeout <= 0 {
		d.Invalid(toml.Key{"lock_timeout"}, "want a positive duration")
	}
	if c.SchedulerTimeout <= 0 {
		d.Invalid(toml.Key{"scheduler_timeout"}, "want a positive duration")
	}
	if c.ReleaseInterval <= 0 {
		d.Invalid(toml.Key{"release_interval"}, "want a positive duration")
	}
	if c.ReleaseDelay < time.Second || c.ReleaseDelay%time.Second != 0 {
		d.Invalid(toml.Key{"release_delay"}, "want whole seconds, at least \"1s\": a release in the requeue's own second kills the job")
	}
	if c.RequeueHoldMax <= 0 {
		d.Invalid(toml.Key{"requeue_hold_max"}, "want a positive duration")
	}
	if c.ScaleInterval <= 0 {
		d.Invalid(toml.Key{"scale_interval"}, "want a positive duration")
	}
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			d.Invalid(toml.Key{"metrics", "listen"}, "want host:port (\"127.0.0.1:9466\"): %v", err)
		}
	}
	jobNames := map[string]string{}
	claim := func(key toml.Key, name, tier string) {
		if other, dup := jobNames[name]; dup {
			d.Invalid(key, "%q is also tier %s's job name", name, other)
		}
		jobNames[name] = tier
	}
	for _, name := range c.TierNames() {
		tc := c.Tiers[name]
		tc.validate(d)
		claim(toml.Key{"tiers", name, "job_name"}, tc.JobName, name)
		if tc.Replicas.Grows() {
			claim(toml.Key{"tiers", name, "replicas", "extra_job_name"}, tc.Replicas.ExtraJobName, name)
			if c.EndpointDir == "" || !filepath.IsAbs(c.EndpointDir) {
				d.Invalid(toml.Key{"endpoint_dir"}, "want the absolute path of the endpoint directory: tier %s has replicas, "+
					"which grow with the requests in flight their endpoint files show", name)
			}
		}
	}
}

// validate checks one tier's settings.
func (t TierConfig) validate(d *tomlconf.Decoder) {
	add := func(key, format string, args ...any) {
		d.Invalid(toml.Key{"tiers", t.Name, key}, format, args...)
	}
	if err := endpoints.CheckTier(t.Name); err != nil {
		d.Invalid(toml.Key{"tiers", t.Name}, "%v", err)
	}
	if t.JobName == "" || strings.ContainsAny(t.JobName, ", \t\n\"'") {
		add("job_name", "want a name without commas, quotes or white space (squeue -n takes a list)")
	}
	if t.Script == "" || !filepath.IsAbs(t.Script) {
		add("script", "want the absolute path of an sbatch script")
	}
	for _, a := range t.SbatchArgs {
		if a == "-J" || strings.HasPrefix(a, "--job-name") || strings.HasPrefix(a, "-J") {
			add("sbatch_args", "set the job name with job_name, not %s", a)
		}
	}
	if t.BackoffInitial <= 0 {
		add("backoff_initial", "want a positive duration")
	}
	if t.BackoffMax < t.BackoffInitial {
		add("backoff_max", "want at least backoff_initial (%s)", t.BackoffInitial)
	}
	if t.BackoffFactor < 1 {
		add("backoff_factor", "want a number ≥ 1")
	}
	if t.HealthyReset <= 0 {
		add("healthy_reset", "want a positive duration")
	}
	if t.MaxSubmitsPerHour < 1 {
		add("max_submits_per_hour", "want at least 1")
	}
	if t.Members < 1 || t.Members > MaxMembers {
		add("members", "want 1 (a tier that is one job) up to %d (an elastic tier's members)", MaxMembers)
	}
	if t.Replicas.Max > 0 {
		t.Replicas.validate(d, toml.Key{"tiers", t.Name, "replicas"}, t.JobName)
	}
}

// validate checks a replicas table (key is its key).
func (r Replicas) validate(d *tomlconf.Decoder, key toml.Key, jobName string) {
	add := func(k, format string, args ...any) {
		d.Invalid(append(append(toml.Key{}, key...), k), format, args...)
	}
	if r.Min < 1 {
		add("min", "want at least 1: the replica that is kept queued and requeued (disable the tier to have none)")
	}
	if r.Min > MaxMembers {
		add("min", "want at most %d", MaxMembers)
	}
	if r.Max < r.Min {
		add("max", "want at least min (%d)", r.Min)
	}
	if r.Max > MaxMembers {
		add("max", "want at most %d", MaxMembers)
	}
	if r.InFlightPerReplica < 1 {
		add("in_flight_per_replica", "want at least 1")
	}
	if r.GrowAfter < 0 {
		add("grow_after", "want a duration ≥ 0")
	}
	if r.IdleAfter < time.Second {
		add("idle_after", "want at least \"1s\"")
	}
	if r.StartTimeout <= 0 {
		add("start_timeout", "want a positive duration")
	}
	if r.ExtraJobName == jobName || strings.ContainsAny(r.ExtraJobName, ", \t\n\"'") {
		add("extra_job_name", "want a name without commas, quotes or white space, other than job_name")
	}
	for _, a := range r.ExtraSbatchArgs {
		if a == "-J" || strings.HasPrefix(a, "--job-name") || strings.HasPrefix(a, "-J") || strings.HasPrefix(a, "--requeue") || strings.HasPrefix(a, "--no-requeue") {
			add("extra_sbatch_args", "%s is set by the keeper (extra_job_name, --requeue)", a)
		}
	}
}

// MaxMembers is the most jobs a tier may keep queued (supervisor/tier's
// [elastic] members allows as many).
const MaxMembers = 64

// ErrWrongUser means a keep pass was started by another account than
// submit_as.
var ErrWrongUser = errors.New("wrong user for submitting the tiers' jobs")

// CheckSubmitUser returns an error wrapping ErrWrongUser unless uid is the
// account submit_as names (or submit_as is empty). A pass run by hand as
// root would otherwise submit the tiers' jobs as root.
func (c *Config) CheckSubmitUser(uid int) error {
	if c.SubmitAs == "" {
		return nil
	}
	want, err := c.submitUID()
	if err != nil {
		return err
	}
	if want != strconv.Itoa(uid) {
		return fmt.Errorf("%w: running as uid %d, submit_as is %s (uid %s): run it as that user "+
			"(systemctl start llm-keeper.service, or sudo -u %s)", ErrWrongUser, uid, c.SubmitAs, want, c.SubmitAs)
	}
	return nil
}

// submitUID is the uid submit_as names (a user name is looked up), as
// text; submit_as must be set.
func (c *Config) submitUID() (string, error) {
	if _, err := strconv.Atoi(c.SubmitAs); err == nil {
		return c.SubmitAs, nil
	}
	u, err := user.Lookup(c.SubmitAs)
	if err != nil {
		return "", fmt.Errorf("submit_as %q: %w", c.SubmitAs, err)
	}
	return u.Uid, nil
}

// SubmitUID is the uid submit_as names; ok is false when submit_as is
// empty or names no account.
func (c *Config) SubmitUID() (uint32, bool) {
	if c.SubmitAs == "" {
		return 0, false
	}
	id, err := c.submitUID()
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(id, 10, 32)
	return uint32(n), err == nil
}

// ReleasePolicy is the part of the config the release check follows.
func (c *Config) ReleasePolicy() ReleasePolicy {
	return ReleasePolicy{Delay: c.ReleaseDelay, RequeueHoldMax: c.RequeueHoldMax}
}

// TierNames returns the configured tiers' names, sorted.
func (c *Config) TierNames() []string {
	names := make([]string, 0, len(c.Tiers))
	for n := range c.Tiers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ErrUnknownTier means a tier name is not configured.
var ErrUnknownTier = errors.New("unknown tier")

// Tier returns the named tier's settings, or an error wrapping
// ErrUnknownTier that names the configured tiers.
func (c *Config) Tier(name string) (TierConfig, error) {
	tc, ok := c.Tiers[name]
	if !ok {
		return TierConfig{}, fmt.Errorf("%w %q: not in %s (configured: %s)", ErrUnknownTier, name, c.Path,
			strings.Join(c.TierNames(), ", "))
	}
	return tc, nil
}
