package slurm

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Config is what `scontrol show config` says of the running controller,
// for the few settings this module depends on. Unset values are "" (Slurm
// prints "(null)").
type Config struct {
	// ClusterName names this cluster in the accounting database
	// (sacctmgr's cluster=).
	ClusterName string
	// Version is SLURM_VERSION, "25.11.7".
	Version string
	// AuthInfo and SchedulerParameters are the comma-separated options
	// the requeue hold is read from (RequeueDelay).
	AuthInfo, SchedulerParameters string
}

// Config runs `scontrol show config`. It asks the controller, so the
// answer is the configuration slurmctld runs with, not a local file.
func (c *Client) Config(ctx context.Context) (Config, error) {
	out, err := c.run(ctx, c.scontrol(), "show", "config")
	if err != nil {
		return Config{}, fmt.Errorf("show config: %w", err)
	}
	return ParseConfig(out)
}

// ParseConfig reads `scontrol show config`: "Key<spaces> = value" lines
// (slurm_print_key_pairs, "%-23s = %s", src/api/config_info.c, the same in
// 20.11 to 25.11), the controller's own settings first, then sections
// (cgroup, MPI, …) whose keys do not matter here: the first occurrence of
// a key wins. ClusterName and SLURM_VERSION must be there.
func ParseConfig(out string) (Config, error) {
	kv := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(line, " = ")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.Contains(k, " ") {
			continue
		}
		if _, seen := kv[k]; !seen {
			kv[k] = strings.TrimSpace(v)
		}
	}
	get := func(k string) string {
		if v := kv[k]; v != "(null)" {
			return v
		}
		return ""
	}
	cfg := Config{ClusterName: get("ClusterName"), Version: get("SLURM_VERSION"),
		AuthInfo: get("AuthInfo"), SchedulerParameters: get("SchedulerParameters")}
	if cfg.ClusterName == "" || cfg.Version == "" {
		return Config{}, fmt.Errorf("scontrol show config: no ClusterName or SLURM_VERSION in %q", truncate(strings.TrimSpace(out)))
	}
	return cfg, nil
}

// DefaultCredExpire is Slurm's credential lifetime when AuthInfo sets no
// cred_expire (DEFAULT_EXPIRATION_WINDOW, src/interfaces/cred.c).
const DefaultCredExpire = 120 * time.Second

// RequeueDelay is D, how long Slurm holds a batch job it requeued: its
// begin time becomes the requeue + D + 1 s (batch_requeue_fini,
// src/slurmctld/job_mgr.c; slurm/FACTS.md V6). From 25.11 D is
// SchedulerParameters requeue_delay= when set (_requeue_delay: a
// comma-separated option, atoi of what follows); otherwise, and before
// 25.11, it is AuthInfo cred_expire= (xstrstr then atoi; below 5, or
// unset, 120 s). Both are read as slurmctld reads them.
func (c Config) RequeueDelay() time.Duration {
	if c.atLeast(25, 11) {
		for _, opt := range strings.Split(c.SchedulerParameters, ",") {
			if v, ok := strings.CutPrefix(opt, "requeue_delay="); ok && v != "" {
				return time.Duration(atoi(v)) * time.Second
			}
		}
	}
	if _, v, ok := strings.Cut(c.AuthInfo, "cred_expire="); ok {
		if n := atoi(v); n >= 5 {
			return time.Duration(n) * time.Second
		}
	}
	return DefaultCredExpire
}

// atLeast reports whether Version is major.minor or later ("25.11.7").
func (c Config) atLeast(major, minor int) bool {
	f := strings.SplitN(c.Version, ".", 3)
	if len(f) < 2 {
		return false
	}
	maj, min := atoi(f[0]), atoi(f[1])
	return maj > major || (maj == major && min >= minor)
}

// atoi is C's atoi: leading spaces, a sign, the digits that follow; 0
// when there are none.
func atoi(s string) int {
	s = strings.TrimLeft(s, " \t\n")
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg, s = s[0] == '-', s[1:]
	}
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' || n > 1<<30 {
			break
		}
		n = n*10 + int(r-'0')
	}
	if neg {
		return -n
	}
	return n
}
