package front

import (
	"maps"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/access"
	"slurm-llm/endpoints/tiers/continuity"
	"slurm-llm/endpoints/tomlconf"
)

// Config is the front door's settings, the [front] table of
// upstreams.toml (etc/README.md documents every key): the front door reads
// its own table (Field, Check); the file's loader (endpoints/config) hands
// it the table, the tier names and the top-level state_dir. The front door
// (`llm-upstreams front`) reads the same endpoint files with the same
// checks as watch, and routes by model in memory. Its zero value is not
// usable: DefaultConfig gives the defaults.
type Config struct {
	// Listen is where clients reach the front door ("127.0.0.1:8090");
	// "" means the front door is not configured and refuses to start.
	Listen string
	// MetricsListen serves /metrics and /status (JSON) for the operator;
	// "" means none. Never the client port: /status names every head.
	MetricsListen string
	// HintListen is the front door's own UDP hint listener (hints: see
	// hint_listen); "" means none.
	HintListen string
	// MaxHeaderBytes and MaxBodyBytes bound a request's header and body.
	MaxHeaderBytes int64
	MaxBodyBytes   int64
	// ReadHeaderTimeout bounds reading a request's header, ReadTimeout
	// the whole request (its body), IdleTimeout a kept-alive connection
	// waiting for its next request, WriteTimeout each write to a client
	// (a client that stops reading a stream this long is cut; the whole
	// response is not bounded: streams last minutes).
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	IdleTimeout       time.Duration
	WriteTimeout      time.Duration
	// ConnectTimeout bounds a connection to a head; FailTimeout is how
	// long a head that refused or reset a request before answering is
	// skipped (nginx's fail_timeout).
	ConnectTimeout time.Duration
	FailTimeout    time.Duration
	// HoldMax caps the hold a client asks for (header X-LLM-Hold).
	HoldMax time.Duration
	// HoldUnknown is how long after a tier's outage began a request is
	// held while its view has no estimate yet (the first seconds of a
	// preemption, before Slurm has one): past it, no estimate means no
	// hold.
	HoldUnknown time.Duration
	// AffinityTTL is how long a conversation's turns go to the head that
	// served its last one (affinity.go); 0 turns that off (least loaded
	// for every request).
	AffinityTTL time.Duration
	// ModelsRefresh is how often each routed head's /v1/models is read
	// (the models it lists and, in router mode, their status).
	ModelsRefresh time.Duration
	// LoadRefresh is how often a head whose slots the front door's
	// requests fill is asked what it really has (its /metrics'
	// requests_processing and requests_deferred, or its /slots), so that
	// requests that reached it another way (nginx's ports) are counted
	// (load.go).
	LoadRefresh time.Duration
	// AccessLog is where one line per request goes: "-" standard error
	// (the journal), "" nowhere, else a file path (appended).
	AccessLog string
	// Aliases maps names clients use to a model name a tier serves.
	Aliases map[string]string
	// DefaultModel serves requests that name no model (llama.cpp's own
	// /completion); "" answers them 400.
	DefaultModel string
	// Tiers are the per-tier settings, one for every tier in [tiers]
	// (those not written get DefaultTier).
	Tiers map[string]TierConfig
	// MaxContinuations bounds how many times one streamed answer is
	// continued on another head.
	MaxContinuations int
	// SlotSaveDir is where the supervisors save their heads' slots at a
	// drain (their [head] slot_save_dir, on storage the controller
	// reads and writes too): a cut stream is continued on a head that
	// restored its slot first, when one was saved. "" (default): never.
	SlotSaveDir string
	// SlotRestoreTimeout bounds the restore before a continuation (its
	// lookups and llama-server's read of the file); past it the
	// continuation is sent without (recomputing its prompt).
	SlotRestoreTimeout time.Duration
	// MaxBodyBytesInFlight bounds the request bodies the front door holds
	// at once, all clients together (each is kept until its answer ends,
	// for retries and continuations); past it a request gets a 503 busy at
	// once instead of growing the process without bound.
	MaxBodyBytesInFlight int64
	// StateDir is where the front door keeps what it writes: the keys it
	// issued (keys.json) and the usage database (usage.db); "" means the
	// top-level state_dir (the watcher's, which the front door reads for
	// its start-to-ready estimates). Shipped: its own directory, which its
	// unit makes (StateDirectory=slurm-llm/front), as its account cannot
	// write the watcher's.
	StateDir string
	// MaxProcs is how many OS threads run the front door's Go code at
	// once (GOMAXPROCS; the environment's GOMAXPROCS wins when set); 0 is
	// Go's default, one per core. One is the default: the front door's
	// work per request is small, and every wakeup of a second thread costs
	// more than the work it would take over (a context switch, dear on a
	// VM; BenchmarkE2EFrontLatency measures both).
	MaxProcs int
	// CORSOrigins are the browser origins ("https://chat.example.org", or
	// "*" for any) whose cross-origin requests the front door allows: it
	// answers their preflight (OPTIONS) and marks its answers to them.
	// Empty (default): no origin is allowed; a preflight gets 204 without
	// CORS headers, and the browser refuses the call.
	CORSOrigins []string
	// UITier is the tier whose heads serve llama-server's web UI at the
	// root URL (GET /, its files, /props, /slots); "" is the first tier by
	// name. Under a tier's prefix ("/reasoning/") that tier's heads serve it.
	UITier string

	// Access is [front.auth], [front.usage], [front.fair_share] and
	// [front.limits]: who sends a request, what it used, who goes next on
	// a busy tier. Package access reads them (access.Config).
	Access access.Config
}

// TierConfig is one tier's front-door settings ([front.tiers.NAME]).
type TierConfig struct {
	// Hold is how long a request waits for the tier to come back (a
	// client may ask for another, at most HoldMax).
	Hold time.Duration
	// MaxHeld and MaxHeldBytes bound the requests held at once (their
	// bodies' bytes); past them a request goes to the least loaded head
	// serving its model, whose own queue takes it, or, with none, gets
	// its 503 at once.
	MaxHeld      int
	MaxHeldBytes int64
	// HeadQueue is how many requests beyond its slots the front door
	// keeps waiting in each head's own queue, so that llama-server takes
	// one the moment a slot frees, in the loop that freed it (held in the
	// front door, the next would reach the head only a round trip after
	// the answer that freed the slot reached the front door): 0 (the
	// zero value, the default) as many as the head has slots, -1 none.
	// Only the requests past them wait in the front door in fair-share
	// order.
	HeadQueue int
	// Models are model names the tier serves, known before any head of it
	// is seen (after a restart of the front door while the tier is down,
	// a request for them is held or answered 503, not 404).
	Models []string
	// BackupModel, when set, is the model (of whichever tier serves it) a
	// request is sent to when this tier cannot serve it within its hold:
	// another model, said by X-LLM-Tier. "" means never.
	BackupModel string
	// Continue: a stream of the tier cut before its end (its head stopped)
	// is continued on another head of its model (default true).
	Continue bool
	// Prefix, when set ("/reasoning"), is a path under which the front
	// door serves this tier alone, as nginx's per-tier URLs did:
	// PREFIX/v1/chat/completions goes to the tier whatever tier the body's
	// model names (a model of another tier is refused 400; a name no tier
	// serves gets the tier's model when it serves exactly one, as a
	// single-model llama-server answers any name), and PREFIX/v1/models
	// lists the tier's models. "" means none.
	Prefix string
}

// DefaultTier is a tier's front-door settings when [front.tiers.NAME]
// leaves them out.
var DefaultTier = TierConfig{Hold: 30 * time.Second, MaxHeld: 256, MaxHeldBytes: 64 << 20, Continue: true}

var defaultConfig = Config{
	MaxHeaderBytes:    64 << 10,
	MaxBodyBytes:      32 << 20,
	ReadHeaderTimeout: 10 * time.Second,
	ReadTimeout:       5 * time.Minute,
	IdleTimeout:       2 * time.Minute,
	WriteTimeout:      2 * time.Minute,
	ConnectTimeout:    2 * time.Second,
	FailTimeout:       5 * time.Second,
	HoldMax:           10 * time.Minute,
	HoldUnknown:       15 * time.Second,
	ModelsRefresh:     2 * time.Second,
	LoadRefresh:       100 * time.Millisecond,
	AffinityTTL:       30 * time.Minute,
	AccessLog:         "-",
	MaxContinuations:  3,

	SlotRestoreTimeout: 20 * time.Second,

	MaxBodyBytesInFlight: 256 << 20,
	MaxProcs:             1,
}

// DefaultConfig is [front] with every key left out (listening
// nowhere), as the loader starts from, and for tests and tools that build
// a config without a file.
func DefaultConfig() Config {
	f := defaultConfig
	f.Tiers = map[string]TierConfig{}
	f.Access = access.DefaultConfig()
	return f
}

// Tier is the front-door settings of tier name: its [front.tiers.NAME],
// or DefaultTier when the config has none for it.
func (c *Config) Tier(name string) TierConfig {
	if t, ok := c.Tiers[name]; ok {
		return t
	}
	return DefaultTier
}

// Hold is what the continuation rule weighs of tier name's settings
// (continuity.Check).
func (c *Config) Hold(name string) continuity.FrontHold {
	t := c.Tier(name)
	return continuity.FrontHold{Hold: t.Hold, Continue: t.Continue}
}

// Field declares the [front] table's keys, access's tables among them.
func (c *Config) Field(d *tomlconf.Decoder) tomlconf.Field {
	f := c
	fields := map[string]tomlconf.Field{
		"listen":                   d.String(&f.Listen),
		"metrics_listen":           d.String(&f.MetricsListen),
		"hint_listen":              d.String(&f.HintListen),
		"max_header_bytes":         d.Bytes(&f.MaxHeaderBytes),
		"max_body_bytes":           d.Bytes(&f.MaxBodyBytes),
		"read_header_timeout":      d.Duration(&f.ReadHeaderTimeout),
		"read_timeout":             d.Duration(&f.ReadTimeout),
		"idle_timeout":             d.Duration(&f.IdleTimeout),
		"write_timeout":            d.Duration(&f.WriteTimeout),
		"connect_timeout":          d.Duration(&f.ConnectTimeout),
		"fail_timeout":             d.Duration(&f.FailTimeout),
		"hold_max":                 d.Duration(&f.HoldMax),
		"hold_unknown":             d.Duration(&f.HoldUnknown),
		"models_refresh":           d.Duration(&f.ModelsRefresh),
		"affinity_ttl":             d.Duration(&f.AffinityTTL),
		"load_refresh":             d.Duration(&f.LoadRefresh),
		"access_log":               d.String(&f.AccessLog),
		"aliases":                  d.StringMap(&f.Aliases),
		"default_model":            d.String(&f.DefaultModel),
		"max_continuations":        d.Int(&f.MaxContinuations),
		"slot_save_dir":            d.String(&f.SlotSaveDir),
		"slot_restore_timeout":     d.Duration(&f.SlotRestoreTimeout),
		"max_body_bytes_in_flight": d.Bytes(&f.MaxBodyBytesInFlight),
		"cors_origins":             d.Strings(&f.CORSOrigins),
		"max_procs":                d.Int(&f.MaxProcs),
		"ui_tier":                  d.String(&f.UITier),
		"state_dir":                d.String(&f.StateDir),
		"tiers": d.Each(func(name string) tomlconf.Field {
			return func(key toml.Key, v any) {
				ft := DefaultTier
				d.Table(key, v, map[string]tomlconf.Field{
					"hold":           d.Duration(&ft.Hold),
					"max_held":       d.Int(&ft.MaxHeld),
					"max_held_bytes": d.Bytes(&ft.MaxHeldBytes),
					"head_queue":     d.Int(&ft.HeadQueue),
					"models":         d.Strings(&ft.Models),
					"backup_model":   d.String(&ft.BackupModel),
					"continue":       d.Bool(&ft.Continue),
					"prefix":         d.String(&ft.Prefix),
				}, nil)
				f.Tiers[name] = ft
			}
		}),
	}
	maps.Copy(fields, c.Access.Fields(d))
	return d.TableField(fields)
}

// Check validates [front] once decoded, given the tiers of [tiers] and the
// top-level state_dir (for the paths that default to it), and gives every
// configured tier its settings.
func (c *Config) Check(d *tomlconf.Decoder, tiers []string, stateDir string) {
	f := c
	isTier := func(name string) bool { return slices.Contains(tiers, name) }
	for _, l := range []struct{ key, addr string }{{"listen", f.Listen}, {"metrics_listen", f.MetricsListen},
		{"hint_listen", f.HintListen}} {
		if l.addr == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(l.addr); err != nil {
			d.Invalid(toml.Key{"front", l.key}, "want host:port or \"\" (%v)", err)
		} else if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			d.Invalid(toml.Key{"front", l.key}, "want a port between 1 and 65535 (got %q)", port)
		}
	}
	if f.Listen != "" && f.Listen == f.MetricsListen {
		d.Invalid(toml.Key{"front", "metrics_listen"}, "the same address as listen: /status names every head, keep it off the client port")
	}
	for key, v := range map[string]time.Duration{"read_header_timeout": f.ReadHeaderTimeout, "read_timeout": f.ReadTimeout,
		"idle_timeout": f.IdleTimeout, "write_timeout": f.WriteTimeout, "connect_timeout": f.ConnectTimeout,
		"fail_timeout": f.FailTimeout, "hold_max": f.HoldMax, "models_refresh": f.ModelsRefresh,
		"slot_restore_timeout": f.SlotRestoreTimeout, "load_refresh": f.LoadRefresh} {
		if v <= 0 {
			d.Invalid(toml.Key{"front", key}, "want a positive duration")
		}
	}
	if f.AffinityTTL < 0 {
		d.Invalid(toml.Key{"front", "affinity_ttl"}, `want a duration, or "0s" for no affinity`)
	}
	if f.SlotSaveDir != "" && !filepath.IsAbs(f.SlotSaveDir) {
		d.Invalid(toml.Key{"front", "slot_save_dir"}, "want an absolute path (got %q)", f.SlotSaveDir)
	}
	if f.MaxContinuations < 0 || f.MaxContinuations > 100 {
		d.Invalid(toml.Key{"front", "max_continuations"}, "want 0 to 100")
	}
	if f.HoldUnknown < 0 {
		d.Invalid(toml.Key{"front", "hold_unknown"}, "want a duration, at least 0s")
	}
	if f.MaxHeaderBytes < 4<<10 || f.MaxHeaderBytes > 1<<20 {
		d.Invalid(toml.Key{"front", "max_header_bytes"}, "want 4 KiB to 1 MiB")
	}
	if f.MaxBodyBytes < 4<<10 {
		d.Invalid(toml.Key{"front", "max_body_bytes"}, "want at least 4 KiB")
	}
	if f.MaxProcs < 0 || f.MaxProcs > 1024 {
		d.Invalid(toml.Key{"front", "max_procs"}, "want 0 (one per core) to 1024")
	}
	if f.MaxBodyBytesInFlight < f.MaxBodyBytes {
		d.Invalid(toml.Key{"front", "max_body_bytes_in_flight"}, "want at least max_body_bytes (%d)", f.MaxBodyBytes)
	}
	for _, o := range f.CORSOrigins {
		if !validOrigin(o) {
			d.Invalid(toml.Key{"front", "cors_origins"}, "%q: want an origin (scheme://host[:port], no path) or \"*\"", o)
		}
	}
	if f.UITier != "" && !isTier(f.UITier) {
		d.Invalid(toml.Key{"front", "ui_tier"}, "%q: not a tier of [tiers]", f.UITier)
	}
	for alias, model := range f.Aliases {
		if alias == "" || model == "" || !endpoints.PrintableName(alias) || !endpoints.PrintableName(model) {
			d.Invalid(toml.Key{"front", "aliases", alias}, "want a model name (1-256 printable bytes) for a name (the same)")
		}
	}
	prefixes := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(f.Tiers)) {
		key := toml.Key{"front", "tiers", name}
		ft := f.Tiers[name]
		if !isTier(name) {
			d.Invalid(key, "not a tier of [tiers]")
			continue
		}
		if ft.Hold < 0 || ft.Hold > f.HoldMax {
			d.Invalid(append(key, "hold"), "want 0s to hold_max (%s)", f.HoldMax)
		}
		if ft.MaxHeld < 0 {
			d.Invalid(append(key, "max_held"), "want 0 or more")
		}
		if ft.MaxHeldBytes < 0 {
			d.Invalid(append(key, "max_held_bytes"), "want 0 or more")
		}
		if ft.HeadQueue < -1 || ft.HeadQueue > 1024 {
			d.Invalid(append(key, "head_queue"), "want 0 (as many as the head's slots), -1 (none) or 1 to 1024")
		}
		for _, m := range ft.Models {
			if !endpoints.PrintableName(m) {
				d.Invalid(append(key, "models"), "%q: want 1-256 printable bytes", m)
			}
		}
		if ft.Prefix != "" {
			if why := badPrefix(ft.Prefix); why != "" {
				d.Invalid(append(key, "prefix"), "%q: %s", ft.Prefix, why)
			} else if other, ok := prefixes[ft.Prefix]; ok {
				d.Invalid(append(key, "prefix"), "%q: tier %s has it too", ft.Prefix, other)
			}
			prefixes[ft.Prefix] = name
		}
	}
	for _, name := range tiers {
		if _, ok := f.Tiers[name]; !ok {
			f.Tiers[name] = DefaultTier
		}
	}
	dir := f.StateDir
	if dir == "" {
		dir = stateDir
	}
	c.Access.Check(d, dir, isTier)
}

// badPrefix says why a tier's path prefix cannot be used; "" when it can:
// one or more path segments of letters, digits, '-', '_' and '.', not a
// path the front door answers itself.
func badPrefix(p string) string {
	if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") {
		return "want a path such as /reasoning (a leading slash, none at the end)"
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "want path segments, no empty, . or .. segment"
		}
		for _, r := range seg {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
				return "want letters, digits, '-', '_' and '.' in its segments"
			}
		}
	}
	switch first, _, _ := strings.Cut(p[1:], "/"); first {
	case "v1", "health", "models", "completion", "completions", "chat", "embeddings", "infill", "rerank",
		"reranking", "tokenize", "detokenize", "apply-template":
		return "a path the front door serves itself"
	}
	return ""
}

// validOrigin reports whether o is "*" or a browser origin: scheme and
// host (and port), nothing after.
func validOrigin(o string) bool {
	if o == "*" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" &&
		(u.Path == "" || u.Path == "/") && u.RawQuery == "" && u.Fragment == "" && u.User == nil && !strings.HasSuffix(o, "/")
}
