// Package access is who uses the front door: it identifies a request's
// user (an API key made with the cluster's munge, a service account's
// static key, or a Tailscale identity from the local proxy), serves the
// key endpoint, records each request's use (package usage: SQLite off the
// request path, Prometheus counters by Slurm account and tier), and says
// who goes next on a busy tier and whether a user may start a request
// (package share: fair share and per-user limits, pure rules). It holds
// no request and routes nothing: the front door (endpoints/front) asks
// it. It reads its own tables of upstreams.toml (config.go: [front.auth],
// [front.usage], [front.fair_share], [front.limits]) and imports no
// controller room. The calls, in the order of a request:
//
//	a := access.New(cfg.Front.Access, access.Options{Log: log}) // at start; a.Close() at the end
//	mux: access.KeysPath → a.Keys (before identity: a user with no key comes here for one)
//	id, err := a.Identifier.Identify(r)                      // first, before the body is read
//	    err != nil → access.WriteUnauthorized(w, err.Error())
//	d := a.Limiter.Admit(tier, id.User)                      // once the tier is known
//	    !d.OK → access.WriteRateLimited(w, d)
//	queue full: i := share.Next(waiters, a.Tracker.Loads(tier)) // or share.Order; Waiter.Weight = a.Weight(id)
//	a.Tracker.Begin(tier, id.User) … a.Tracker.End(tier, id.User, served) // around the head's answer
//	a.Limiter.Done(tier, id.User, prompt+completion)          // at the end
//	a.Usage.Add(usage.Record{…})                              // after the answer is flushed (finish)
//	access log: id.LogFields();  registry: a.Collectors()...;  SIGHUP: a.Reload(cfg.Front.Access)
package access

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"slurm-llm/endpoints/access/share"
	"slurm-llm/endpoints/access/usage"
)

// Options are what New needs besides the config; nil fields get the real
// thing.
type Options struct {
	Log hclog.Logger
	Now func() time.Time
}

// Access is the parts built from [front.auth], [front.usage],
// [front.fair_share] and [front.limits].
type Access struct {
	// Identifier says who sent a request.
	Identifier *Identifier
	// Keys is the key endpoint; nil when no keys file is configured (no
	// state_dir): mount nothing then. OperatorKeys is the same endpoint
	// for the operator listener (metrics_listen, loopback): its own
	// limits, so that root can revoke a leaked key while the client port
	// is flooded; one store and one replay guard with Keys.
	Keys, OperatorKeys *KeyHandler
	// Usage records requests; nil when no database is configured.
	Usage *usage.Recorder
	// Metrics counts tokens and requests by account and tier.
	Metrics *usage.Metrics
	// Limiter applies the per-user limits; Tracker keeps what each user
	// has on a head; Weights reads sshare (nil with equal weights).
	Limiter *share.Limiter
	Tracker *share.Tracker
	Weights *share.Weights
	// FairShare is [front.fair_share] enabled: false means arrival order.
	FairShare bool
	accounts  *Accounts
	log       hclog.Logger
}

// New builds the parts: the keys file and the static keys file are read
// (a static keys file others can read is an error naming it), the usage
// database opened (an error names it). Close releases them.
func New(cfg Config, o Options) (*Access, error) {
	if o.Log == nil {
		o.Log = hclog.NewNullLogger()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	a := &Access{log: o.Log, Metrics: usage.NewMetrics(cfg.Usage.UserLabel), FairShare: cfg.FairShare.Enabled,
		Tracker: share.NewTracker(cfg.FairShare.HalfLife, o.Now)}
	auth := cfg.Auth
	a.accounts = NewAccounts(AccountsOptions{Disabled: !auth.SlurmAccounts, TTL: auth.AccountsTTL, Now: o.Now})
	static, err := loadStatic(auth.StaticKeysFile)
	if err != nil {
		return nil, err
	}
	store, err := OpenStore(auth.KeysFile, o.Now)
	if err != nil {
		return nil, err
	}
	a.Identifier = NewIdentifier(identifyConfig(auth), store, static, a.accounts.Cached)
	if auth.KeysFile != "" {
		ko := KeyHandlerOptions{Store: store, Accounts: a.accounts, AdminGroup: auth.AdminGroup,
			KeyTTL: auth.KeyTTL, Rate: auth.KeyRate, Burst: auth.KeyBurst, Now: o.Now, Log: o.Log.Named("keys"),
			Replays: &ReplayGuard{}}
		a.Keys = NewKeyHandler(ko)
		ko.Log = o.Log.Named("operator-keys")
		a.OperatorKeys = NewKeyHandler(ko)
	}
	def, tiers := limits(cfg.Limits)
	a.Limiter = share.NewLimiter(def, tiers, o.Now)
	if cfg.FairShare.Weights == "sshare" {
		a.Weights = share.NewWeights(share.WeightsOptions{TTL: cfg.FairShare.SshareTTL, Now: o.Now, Log: o.Log.Named("sshare")})
	}
	if cfg.Usage.Database != "" {
		a.Usage, err = usage.Open(cfg.Usage.Database, usage.Options{Batch: cfg.Usage.Batch, Flush: cfg.Usage.Flush,
			Queue: cfg.Usage.Queue, Retention: cfg.Usage.Retention, Metrics: a.Metrics, Now: o.Now, Log: o.Log.Named("usage")})
		if err != nil {
			return nil, err
		}
	}
	return a, nil
}

func loadStatic(path string) ([]StaticKey, error) {
	if path == "" {
		return nil, nil
	}
	return LoadStaticKeys(path)
}

func identifyConfig(auth AuthConfig) IdentifyConfig {
	return IdentifyConfig{Mode: Mode(auth.Mode), TrustedProxies: auth.TrustedPrefixes, TrustedProxyUsers: auth.TrustedProxyUsers,
		TailscaleUsers: auth.TailscaleUsers}
}

func limits(l LimitsConfig) (share.Limits, map[string]share.Limits) {
	conv := func(f Limit) share.Limits {
		return share.Limits{InFlight: f.InFlight, RequestsPerMinute: f.RequestsPerMinute, TokensPerMinute: f.TokensPerMinute}
	}
	tiers := map[string]share.Limits{}
	for name, f := range l.Tiers {
		tiers[name] = conv(f)
	}
	return conv(l.Default), tiers
}

// Reload takes a new config (SIGHUP): the mode, trusted proxies, Tailscale
// users, static keys (the file read again; on error the old keys stay and
// the error is returned) and limits. The keys file, the database and the
// fair-share settings stay as started.
func (a *Access) Reload(cfg Config) error {
	a.Identifier.SetConfig(identifyConfig(cfg.Auth))
	def, tiers := limits(cfg.Limits)
	a.Limiter.SetLimits(def, tiers)
	static, err := loadStatic(cfg.Auth.StaticKeysFile)
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	a.Identifier.SetStaticKeys(static)
	return nil
}

// Weight is the fair-share weight of id's user: sshare's factor where
// configured, else 1.
func (a *Access) Weight(id Identity) float64 {
	if a.Weights == nil {
		return 1
	}
	return a.Weights.Weight(id.User, id.Account)
}

// Collectors are the metrics to register on the front door's registry.
func (a *Access) Collectors() []prometheus.Collector {
	cs := []prometheus.Collector{a.Metrics}
	if a.Keys != nil {
		cs = append(cs, a.Keys.Collector())
	}
	return cs
}

// Close flushes and closes the usage database.
func (a *Access) Close() error {
	if a.Usage == nil {
		return nil
	}
	return errors.Join(a.Usage.Close())
}
