package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// flagDef names the config key a flag sets and whether it takes a value.
type flagDef struct {
	key     string
	boolean bool
}

// commonFlags are read in both modes; most are fake-only knobs to misbehave.
var commonFlags = map[string]flagDef{
	"--fake-fail-start":     {"fail-start", true},
	"--fake-exit-after":     {"exit-after", false},
	"--fake-ignore-sigterm": {"ignore-sigterm", true},
	"--fake-term-delay":     {"term-delay", false},
	"--fake-startup-delay":  {"startup-delay", false},
	"--fake-rpc-version":    {"rpc-version", false},
	"--fake-hash-mbps":      {"hash-mbps", false},
	"--version":             {"version", true},
}

// rpcFlags are ggml-rpc-server's own flags (-H host -p port -c cache -m mem -t threads -d devices).
var rpcFlags = map[string]flagDef{
	"-H": {"host", false}, "--host": {"host", false},
	"-p": {"port", false}, "--port": {"port", false},
	"-c": {"cache", true}, "--cache": {"cache", true},
}

// serverFlags are llama-server's flags the fake reads, plus its boolean flags that the
// tolerant parser must not mistake for flags taking a value.
var serverFlags = map[string]flagDef{
	"--host": {"host", false}, "--port": {"port", false},
	"-m": {"model", false}, "--model": {"model", false},
	"-a": {"alias", false}, "--alias": {"alias", false},
	"--rpc": {"rpc", false}, "--metrics": {"metrics", true},
	"--models-dir": {"models-dir", false}, "--models-max": {"models-max", false},
	"-np": {"parallel", false}, "--parallel": {"parallel", false},
	"--slot-save-path":                    {"slot-save-path", false},
	"--fake-kv-bytes-per-token":           {"kv-bytes-per-token", false},
	"--fake-load-time":                    {"load-time", false},
	"--fake-token-rate":                   {"token-rate", false},
	"--fake-tokens":                       {"tokens", false},
	"--fake-hang-health":                  {"hang-health", true},
	"--fake-metrics-delay":                {"metrics-delay", false},
	"--fake-hang-on-term-while-streaming": {"hang-on-term-while-streaming", true},
	"--fake-term-stream-exit":             {"term-stream-exit", false},
	"--fake-model-mb":                     {"model-mb", false},
	"--fake-link-mbps":                    {"link-mbps", false},
	"-ts":                                 {"tensor-split", false},
	"--tensor-split":                      {"tensor-split", false},
	"--mlock":                             {"", true}, "--no-mmap": {"", true}, "--cont-batching": {"", true},
	"--no-cont-batching": {"", true}, "--jinja": {"", true}, "--embedding": {"", true},
	"--embeddings": {"", true}, "--no-webui": {"", true}, "--slots": {"", true},
	"--no-slots": {"", true}, "--log-disable": {"", true}, "--no-warmup": {"", true},
	"-v": {"", true}, "--verbose": {"", true}, "--kv-unified": {"", true},
}

// parseArgs reads args tolerantly, the way configs written for real llama.cpp need:
// known flags are parsed (as `--x v` or `--x=v`); an unknown `--x=v` is ignored; an
// unknown `--x` followed by a token that is not a flag takes it as its value, else it is
// a boolean. Positional arguments are ignored. The result maps config keys to values.
func parseArgs(args []string, known ...map[string]flagDef) (map[string]string, error) {
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		tok := args[i]
		if !isFlag(tok) {
			continue
		}
		name, val, hasVal := strings.Cut(tok, "=")
		def, ok := lookup(name, known)
		switch {
		case ok && def.boolean && !hasVal:
			val = "true"
		case ok && !hasVal:
			if i+1 >= len(args) {
				return nil, fmt.Errorf("flag %s needs a value", name)
			}
			i++
			val = args[i]
		case !ok && !hasVal && i+1 < len(args) && !isFlag(args[i+1]):
			i++
		}
		if ok && def.key != "" {
			out[def.key] = val
		}
	}
	return out, nil
}

func lookup(name string, tables []map[string]flagDef) (flagDef, bool) {
	for _, t := range tables {
		if d, ok := t[name]; ok {
			return d, true
		}
	}
	return flagDef{}, false
}

// isFlag reports whether tok starts a flag; negative numbers (`--seed -1`) are values.
func isFlag(tok string) bool {
	if len(tok) < 2 || tok[0] != '-' {
		return false
	}
	_, err := strconv.ParseFloat(tok, 64)
	return err != nil
}

// config is what one run of the fake does; zero durations mean "no delay".
type config struct {
	mode                    string
	host                    string
	port                    int
	model, alias, modelsDir string
	modelsMax, parallel     int
	rpc                     []string
	metrics                 bool
	loadTime, exitAfter     time.Duration
	termDelay, startupDelay time.Duration
	termStreamExit          time.Duration
	// metricsDelay: /metrics answers this late (a fault injected by tests).
	metricsDelay          time.Duration
	tokenRate             float64
	tokens                int
	failStart, ignoreTerm bool
	hangOnTermStreaming   bool
	hangHealth, version   bool
	rpcVersion            string

	// Loading weights over RPC (Q3, facts 20 and 27). MiB and MiB/s.
	modelMiB           int
	hashMiBs, linkMiBs float64
	tensorSplit        []float64 // --tensor-split: workers first, then the head's own
	cache              bool      // rpc-server -c: keep large tensors in a file cache

	// slotSavePath is --slot-save-path ("": slot actions answer 501);
	// flashAttn -fa (a restore must match it); kvBytesPerToken the saved
	// slot's size per token.
	slotSavePath    string
	flashAttn       string
	kvBytesPerToken int
}

// defaultRPCVersion is the version printed by "Starting RPC server v..." and checked at connect.
// It is the version measured on 2026-11-23 (llama.cpp 3f545bec: "Starting RPC server v5.1.0").
const defaultRPCVersion = "5.1.0"

// defaultHashMiBs is how fast the head hashes tensors: byte-wise FNV-1a on
// one core, ~0.9 GB/s (fact 27).
const defaultHashMiBs = 900

// defaultLinkMiBs is how fast weights cross the link to a worker, in MiB/s
// (not Mbit/s: a 1 Gbit/s link is ~119).
const defaultLinkMiBs = 1000

// defaultTermStreamExit is how long after SIGTERM with a stream in flight
// real llama-server exited 0 (measured 2026-11-23, "Extra: fact 15
// re-checked": 30.1 s in 5 of 6 trials).
const defaultTermStreamExit = 30 * time.Second

// parseConfig turns the mode's arguments into a config with llama.cpp's defaults.
func parseConfig(mode string, args []string) (config, error) {
	tables := []map[string]flagDef{commonFlags, serverFlags}
	cfg := config{mode: mode, host: "127.0.0.1", port: 8080, parallel: 1, modelsMax: 4, tokenRate: 50,
		flashAttn: "auto", kvBytesPerToken: defaultKVBytesPerToken,
		tokens: 16, termDelay: 100 * time.Millisecond, termStreamExit: defaultTermStreamExit,
		rpcVersion: defaultRPCVersion, hashMiBs: defaultHashMiBs, linkMiBs: defaultLinkMiBs}
	if mode == modeRPC {
		tables = []map[string]flagDef{commonFlags, rpcFlags}
		cfg.port = 50052
	}
	vals, err := parseArgs(args, tables...)
	if err != nil {
		return config{}, err
	}
	p := valueParser{vals: vals}
	p.str("host", &cfg.host)
	p.str("model", &cfg.model)
	p.str("alias", &cfg.alias)
	p.str("models-dir", &cfg.modelsDir)
	p.str("rpc-version", &cfg.rpcVersion)
	p.integer("port", &cfg.port)
	p.integer("models-max", &cfg.modelsMax)
	p.integer("parallel", &cfg.parallel)
	p.integer("tokens", &cfg.tokens)
	p.float("token-rate", &cfg.tokenRate)
	p.duration("load-time", &cfg.loadTime)
	p.duration("exit-after", &cfg.exitAfter)
	p.duration("term-delay", &cfg.termDelay)
	p.duration("term-stream-exit", &cfg.termStreamExit)
	p.duration("metrics-delay", &cfg.metricsDelay)
	p.duration("startup-delay", &cfg.startupDelay)
	p.boolean("metrics", &cfg.metrics)
	p.boolean("fail-start", &cfg.failStart)
	p.boolean("ignore-sigterm", &cfg.ignoreTerm)
	p.boolean("hang-on-term-while-streaming", &cfg.hangOnTermStreaming)
	p.boolean("hang-health", &cfg.hangHealth)
	p.boolean("version", &cfg.version)
	p.boolean("cache", &cfg.cache)
	p.integer("model-mb", &cfg.modelMiB)
	p.float("hash-mbps", &cfg.hashMiBs)
	p.float("link-mbps", &cfg.linkMiBs)
	p.floats("tensor-split", &cfg.tensorSplit)
	p.str("slot-save-path", &cfg.slotSavePath)
	if mode == modeServer {
		cfg.flashAttn = flashAttnOf(args, cfg.flashAttn)
	}
	p.integer("kv-bytes-per-token", &cfg.kvBytesPerToken)
	if v, ok := vals["rpc"]; ok && v != "" {
		cfg.rpc = strings.Split(v, ",")
	}
	if cfg.parallel < 1 {
		cfg.parallel = 1
	}
	if p.err == nil && cfg.slotSavePath != "" {
		// real refuses to start: "not a directory" (common/arg.cpp:3579)
		if st, err := os.Stat(cfg.slotSavePath); err != nil || !st.IsDir() {
			return config{}, fmt.Errorf("error while handling argument \"--slot-save-path\": not a directory: %s", cfg.slotSavePath)
		}
	}
	return cfg, p.err
}

// flashAttnOf is -fa/--flash-attn's value (on, off, auto), read apart
// from the tolerant parser: an older config's bare --flash-attn (a
// boolean then) must keep working; it reads as "on".
func flashAttnOf(args []string, def string) string {
	for i, a := range args {
		name, val, ok := strings.Cut(a, "=")
		if name != "-fa" && name != "--flash-attn" {
			continue
		}
		switch {
		case ok:
			def = val
		case i+1 < len(args) && !isFlag(args[i+1]):
			def = args[i+1]
		default:
			def = "on"
		}
	}
	return def
}

// valueParser converts flag values, keeping the first error.
type valueParser struct {
	vals map[string]string
	err  error
}

func (p *valueParser) set(key string, conv func(string) error) {
	v, ok := p.vals[key]
	if !ok || p.err != nil {
		return
	}
	if err := conv(v); err != nil {
		p.err = fmt.Errorf("flag %s=%q: %w", key, v, err)
	}
}

func (p *valueParser) str(key string, dst *string) {
	p.set(key, func(v string) error { *dst = v; return nil })
}

func (p *valueParser) integer(key string, dst *int) {
	p.set(key, func(v string) (err error) { *dst, err = strconv.Atoi(v); return err })
}

func (p *valueParser) float(key string, dst *float64) {
	p.set(key, func(v string) (err error) { *dst, err = strconv.ParseFloat(v, 64); return err })
}

func (p *valueParser) boolean(key string, dst *bool) {
	p.set(key, func(v string) (err error) { *dst, err = strconv.ParseBool(v); return err })
}

// floats reads a list like llama.cpp's --tensor-split: numbers separated by
// commas or slashes.
func (p *valueParser) floats(key string, dst *[]float64) {
	p.set(key, func(v string) error {
		var out []float64
		for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == '/' }) {
			x, err := strconv.ParseFloat(f, 64)
			if err != nil || x < 0 {
				return fmt.Errorf("bad split %q", f)
			}
			out = append(out, x)
		}
		*dst = out
		return nil
	})
}

// duration accepts Go durations ("2s", "200ms") and bare numbers of seconds ("2").
func (p *valueParser) duration(key string, dst *time.Duration) {
	p.set(key, func(v string) error {
		if secs, err := strconv.ParseFloat(v, 64); err == nil {
			*dst = time.Duration(secs * float64(time.Second))
			return nil
		}
		d, err := time.ParseDuration(v)
		*dst = d
		return err
	})
}
