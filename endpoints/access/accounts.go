package access

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"slurm-llm/endpoints/access/internal/execx"
	"slurm-llm/slurm"
)

// ErrNoAccount means Slurm's accounting knows no association for the
// user (sacctmgr answered, with nothing).
var ErrNoAccount = errors.New("no Slurm account")

// UserAccounts are a user's Slurm accounts.
type UserAccounts struct {
	// Default is the user's default account ("" when unset).
	Default string
	// All are the accounts the user has an association in, sorted.
	All []string
}

// ParseSacctmgr reads `sacctmgr -n -P show user NAME withassoc
// cluster=CLUSTER format=User,DefaultAccount,Account` for user: one line
// per association, "user|default|account", the default being the
// cluster's (so one cluster only: the last line's default is kept). Lines of another user are an error (the name was
// not taken as a name); no line at all is ErrNoAccount.
func ParseSacctmgr(out []byte, user string) (UserAccounts, error) {
	var ua UserAccounts
	sc := bufio.NewScanner(bytes.NewReader(out))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := strings.Split(line, "|")
		if len(f) != 3 {
			return UserAccounts{}, fmt.Errorf("sacctmgr line %d: want User|DefaultAccount|Account, got %q", n, line)
		}
		if f[0] != user {
			return UserAccounts{}, fmt.Errorf("sacctmgr line %d: user %q, asked for %q", n, f[0], user)
		}
		ua.Default = f[1]
		if f[2] != "" && !slices.Contains(ua.All, f[2]) {
			ua.All = append(ua.All, f[2])
		}
	}
	if err := sc.Err(); err != nil {
		return UserAccounts{}, err
	}
	if ua.Default == "" && len(ua.All) == 0 {
		return UserAccounts{}, fmt.Errorf("%w for user %s", ErrNoAccount, user)
	}
	slices.Sort(ua.All)
	return ua, nil
}

// Choose is the account a user's key counts under: the default, or
// override when it is one of the user's accounts.
func (ua UserAccounts) Choose(override string) (string, error) {
	if override == "" {
		if ua.Default == "" && len(ua.All) > 0 {
			return ua.All[0], nil
		}
		return ua.Default, nil
	}
	if !slices.Contains(ua.All, override) {
		return "", fmt.Errorf("account %q is not one of yours (%s)", override, strings.Join(ua.All, ", "))
	}
	return override, nil
}

// AccountsOptions configure Accounts; zero fields get defaults.
type AccountsOptions struct {
	// Disabled: Slurm's accounting is not asked (no slurmdbd); every
	// user's accounts are unknown and no override is taken.
	Disabled bool
	// Sacctmgr is the binary ("sacctmgr").
	Sacctmgr string
	// Cluster is the cluster whose associations count (sacctmgr's
	// cluster=): a default account is per cluster, and a slurmdbd that
	// serves several clusters answers for all of them when none is named
	// (slurm/FACTS.md V8). "" means this one, as `scontrol show config`
	// names it, asked on the first lookup and kept.
	Cluster string
	// Scontrol is the binary that names the cluster ("scontrol").
	Scontrol string
	// TTL is how long an answer is kept (10m); Timeout bounds one run (10s).
	TTL, Timeout time.Duration
	// Run runs sacctmgr (nil: execx.Slurm, in slurm.CommandEnv's
	// environment).
	Run execx.Runner
	Now func() time.Time
}

// Accounts looks users' Slurm accounts up with sacctmgr and keeps the
// answers for a TTL. Safe for concurrent use.
type Accounts struct {
	opts    AccountsOptions
	mu      sync.Mutex
	cluster string // opts.Cluster, or the one scontrol named
	cache   map[string]cachedAccounts
}

type cachedAccounts struct {
	ua UserAccounts
	at time.Time
}

// maxCachedUsers bounds the cache; past it the oldest half goes.
const maxCachedUsers = 4096

// NewAccounts returns an empty cache.
func NewAccounts(opts AccountsOptions) *Accounts {
	if opts.Sacctmgr == "" {
		opts.Sacctmgr = "sacctmgr"
	}
	if opts.Scontrol == "" {
		opts.Scontrol = "scontrol"
	}
	if opts.TTL <= 0 {
		opts.TTL = 10 * time.Minute
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Run == nil {
		opts.Run = execx.Slurm
	}
	return &Accounts{opts: opts, cluster: opts.Cluster, cache: map[string]cachedAccounts{}}
}

// clusterName is the cluster the lookups ask about: opts.Cluster, else
// ClusterName from `scontrol show config`, asked until it answers.
func (a *Accounts) clusterName(ctx context.Context) (string, error) {
	a.mu.Lock()
	name := a.cluster
	a.mu.Unlock()
	if name != "" {
		return name, nil
	}
	argv := []string{a.opts.Scontrol, "show", "config"}
	out, err := execx.Run(ctx, a.opts.Run, a.opts.Timeout, argv, nil)
	if err != nil {
		return "", fmt.Errorf("name this cluster: %w", err)
	}
	cfg, err := slurm.ParseConfig(string(out))
	if err != nil {
		return "", fmt.Errorf("name this cluster: %w", err)
	}
	a.mu.Lock()
	a.cluster = cfg.ClusterName
	a.mu.Unlock()
	return cfg.ClusterName, nil
}

// Lookup is user's accounts: from the cache when fresh, else from
// sacctmgr (bounded by the timeout). Disabled, it is none.
func (a *Accounts) Lookup(ctx context.Context, user string) (UserAccounts, error) {
	if a.opts.Disabled {
		return UserAccounts{}, nil
	}
	if !ValidName(user) {
		return UserAccounts{}, fmt.Errorf("look up the Slurm accounts of %q: not a user name", user)
	}
	if ua, ok := a.cached(user, true); ok {
		return ua, nil
	}
	cluster, err := a.clusterName(ctx)
	if err != nil {
		return UserAccounts{}, fmt.Errorf("look up the Slurm accounts of %s: %w", user, err)
	}
	argv := []string{a.opts.Sacctmgr, "-n", "-P", "show", "user", user, "withassoc", "cluster=" + cluster, "format=User,DefaultAccount,Account"}
	out, err := execx.Run(ctx, a.opts.Run, a.opts.Timeout, argv, nil)
	if err != nil {
		return UserAccounts{}, fmt.Errorf("look up the Slurm accounts of %s: %w", user, err)
	}
	ua, err := ParseSacctmgr(out, user)
	if err != nil {
		return UserAccounts{}, fmt.Errorf("look up the Slurm accounts of %s: %w", user, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.cache) >= maxCachedUsers {
		a.evictLocked()
	}
	a.cache[user] = cachedAccounts{ua: ua, at: a.opts.Now()}
	return ua, nil
}

// Cached is user's default account if an answer is cached (stale or
// not), without running anything: for the request path.
func (a *Accounts) Cached(user string) string {
	ua, _ := a.cached(user, false)
	return ua.Default
}

func (a *Accounts) cached(user string, fresh bool) (UserAccounts, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.cache[user]
	if !ok || (fresh && a.opts.Now().Sub(c.at) >= a.opts.TTL) {
		return c.ua, false
	}
	return c.ua, true
}

// evictLocked drops the older half of the cache.
func (a *Accounts) evictLocked() {
	ats := make([]time.Time, 0, len(a.cache))
	for _, c := range a.cache {
		ats = append(ats, c.at)
	}
	slices.SortFunc(ats, time.Time.Compare)
	cut := ats[len(ats)/2]
	for u, c := range a.cache {
		if c.at.Before(cut) {
			delete(a.cache, u)
		}
	}
}
