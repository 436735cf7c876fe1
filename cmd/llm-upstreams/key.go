package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"slurm-llm/endpoints/access"
	"slurm-llm/endpoints/access/munge"
	"slurm-llm/endpoints/config"
)

// URLEnv names the front door for `llm-upstreams key` when --url is not
// given (a cluster node has no upstreams.toml).
const URLEnv = "SLURM_LLM_URL"

func keyUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: llm-upstreams key create [--account A] [--ttl 720h] [--note TEXT] [--url URL] [--json]\n"+
		"       llm-upstreams key list [--all] [--url URL] [--json]\n"+
		"       llm-upstreams key revoke (--id ID | --user NAME) [--url URL] [--json]\n"+
		"       llm-upstreams key generate   (a random key for the static keys file; nothing is sent)\n"+
		"The front door's URL: --url, else $%s, else [front] listen of --config when it names one\n"+
		"address of the network (never a loopback or wildcard one: on a node, another user could listen there).\n"+
		"Each request carries a munge credential (munge is run with the request as its payload).\n", URLEnv)
}

// keyOptions are `llm-upstreams key`'s flags.
type keyOptions struct {
	url, config, munge string
	account, ttl, note string
	id, user           string
	all, asJSON        bool
	timeout            time.Duration
	op                 string
	stdout, stderr     io.Writer
	// httpClient, encode and getenv are the real thing when nil (tests
	// give their own).
	httpClient *http.Client
	encode     func(ctx context.Context, payload []byte) ([]byte, error)
	getenv     func(string) string
}

// runKey is `llm-upstreams key`: a cluster user's keys, made and managed
// with a munge credential (the front door's /v1/slurm-llm/keys).
func runKey(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := stderr
		if len(args) > 0 {
			w = stdout
		}
		keyUsage(w)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	o := keyOptions{op: args[0], stdout: stdout, stderr: stderr, getenv: os.Getenv}
	fs := newFlagSet("llm-upstreams key "+o.op, stderr)
	fs.StringVar(&o.url, "url", "", "the front door, e.g. http://ctl:8090 (default $"+URLEnv+")")
	fs.StringVar(&o.config, "config", defaultConfig, "upstreams.toml, for [front] listen when no URL is given")
	fs.StringVar(&o.munge, "munge", "munge", "the munge binary")
	fs.StringVar(&o.account, "account", "", "create: another of your Slurm accounts than the default")
	fs.StringVar(&o.ttl, "ttl", "", "create: a shorter life than the front door's key_ttl, e.g. 720h")
	fs.StringVar(&o.note, "note", "", "create: your own name for the key (shown by list)")
	fs.BoolVar(&o.all, "all", false, "list: every user's keys (root and the admin group)")
	fs.StringVar(&o.id, "id", "", "revoke: the key with this id")
	fs.StringVar(&o.user, "user", "", "revoke: every key of this user (yours, or anyone's for root and the admin group)")
	fs.BoolVar(&o.asJSON, "json", false, "print the front door's JSON answer")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "bound on the whole request")
	err := fs.Parse(args[1:])
	if isHelp(err) {
		return printHelp(fs, keyUsage, stdout)
	}
	if err != nil || fs.NArg() != 0 {
		keyUsage(stderr)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return o.run(ctx)
}

// run carries out o.op.
func (o keyOptions) run(ctx context.Context) int {
	if o.op == "generate" {
		key, _, _, err := access.NewKey(nil)
		if err != nil {
			fmt.Fprintln(o.stderr, "llm-upstreams key generate:", err)
			return exitFailed
		}
		fmt.Fprintln(o.stdout, key)
		return exitOK
	}
	req, method, err := o.request()
	if err != nil {
		fmt.Fprintf(o.stderr, "llm-upstreams key %s: %v\n", o.op, err)
		return exitUsage
	}
	base, err := o.frontURL()
	if err != nil {
		fmt.Fprintf(o.stderr, "llm-upstreams key %s: %v\n", o.op, err)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	status, body, err := o.send(ctx, base, method, req)
	if err != nil {
		fmt.Fprintf(o.stderr, "llm-upstreams key %s: %v\n", o.op, err)
		return exitFailed
	}
	if status >= 300 {
		fmt.Fprintf(o.stderr, "llm-upstreams key %s: the front door answered %d: %s\n", o.op, status, errorMessage(body))
		return exitFailed
	}
	if o.asJSON {
		_, _ = o.stdout.Write(body)
		return exitOK
	}
	if err := o.print(body); err != nil {
		fmt.Fprintf(o.stderr, "llm-upstreams key %s: %v\n", o.op, err)
		return exitFailed
	}
	return exitOK
}

// request is the payload and method of o.op.
func (o keyOptions) request() (access.KeyRequest, string, error) {
	req := access.KeyRequest{Aud: access.KeyAudience, Op: o.op}
	switch o.op {
	case "create":
		req.Account, req.TTL, req.Note = o.account, o.ttl, o.note
		return req, http.MethodPost, nil
	case "list":
		req.All = o.all
		return req, http.MethodGet, nil
	case "revoke":
		if (o.id == "") == (o.user == "") {
			return req, "", errors.New("name one key (--id) or one user (--user)")
		}
		req.ID, req.User = o.id, o.user
		return req, http.MethodDelete, nil
	}
	return req, "", fmt.Errorf("unknown command %q: create, list, revoke or generate", o.op)
}

// frontURL is the front door's base URL: --url, $SLURM_LLM_URL, or the
// config's [front] listen when it names one address of the network. A
// loopback or wildcard listen is never taken: run on a node, 127.0.0.1 is
// the node's own, where any user may listen first and take the fresh
// credential to trade it for a key in the caller's name.
func (o keyOptions) frontURL() (string, error) {
	u := o.url
	if u == "" {
		u = o.getenv(URLEnv)
	}
	if u == "" {
		cfg, err := config.Load(o.config)
		if err != nil || cfg.Front.Listen == "" {
			return "", fmt.Errorf("no front door URL: pass --url http://HOST:PORT or set %s", URLEnv)
		}
		host, port, _ := net.SplitHostPort(cfg.Front.Listen)
		if local(host) {
			return "", fmt.Errorf("no front door URL: pass --url http://HOST:PORT or set %s ([front] listen %q is this host's own loopback or every address: on a node another user could listen there first and take the credential)", URLEnv, cfg.Front.Listen)
		}
		u = "http://" + net.JoinHostPort(host, port)
	}
	if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return "", fmt.Errorf("--url %q: want http://HOST:PORT or https://…", u)
	}
	return strings.TrimRight(u, "/"), nil
}

// local reports whether host is a wildcard, a loopback address or
// localhost: an address every host has of its own.
func local(host string) bool {
	if host == "" || access.LoopbackHost(host) {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// send makes the credential and sends the request.
func (o keyOptions) send(ctx context.Context, base, method string, req access.KeyRequest) (int, []byte, error) {
	req.To = base // the front door it is meant for (checked there)
	payload, _ := json.Marshal(req)
	encode := o.encode
	if encode == nil {
		encode = func(ctx context.Context, p []byte) ([]byte, error) { return munge.Encode(ctx, o.munge, p, nil) }
	}
	cred, err := encode(ctx, payload)
	if err != nil {
		return 0, nil, err
	}
	hr, err := http.NewRequestWithContext(ctx, method, base+access.KeysPath, nil)
	if err != nil {
		return 0, nil, err
	}
	hr.Header.Set("Authorization", "MUNGE "+string(cred))
	client := o.httpClient
	if client == nil {
		client = &http.Client{}
	}
	resp, err := client.Do(hr)
	if err != nil {
		return 0, nil, fmt.Errorf("ask the front door: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("read the front door's answer: %w", err)
	}
	return resp.StatusCode, body, nil
}

// errorMessage is an OpenAI error document's message, or the body cut.
func errorMessage(body []byte) string {
	var doc struct {
		Error struct {
			Message string `json:"message"`
			Code    any    `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &doc) == nil && doc.Error.Message != "" {
		return fmt.Sprintf("%s (%v)", doc.Error.Message, doc.Error.Code)
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// print shows the answer for people.
func (o keyOptions) print(body []byte) error {
	switch o.op {
	case "create":
		var k access.KeyCreated
		if err := json.Unmarshal(body, &k); err != nil {
			return fmt.Errorf("read the answer: %w", err)
		}
		fmt.Fprintf(o.stdout, "%s\n\nid %s, user %s, account %s, expires %s\n", k.Key, k.ID, k.User, dashIfEmpty(k.Account),
			k.Expires.Format(time.RFC3339))
		fmt.Fprintln(o.stderr, "The key is shown this once: keep it (e.g. export OPENAI_API_KEY=…); revoke it with llm-upstreams key revoke --id "+k.ID)
	case "list":
		var l struct {
			Keys []access.KeyInfo `json:"keys"`
		}
		if err := json.Unmarshal(body, &l); err != nil {
			return fmt.Errorf("read the answer: %w", err)
		}
		tw := tabwriter.NewWriter(o.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tUSER\tACCOUNT\tCREATED\tEXPIRES\tNOTE")
		for _, k := range l.Keys {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.User, dashIfEmpty(k.Account), k.Created.Format(time.RFC3339),
				k.Expires.Format(time.RFC3339), k.Note)
		}
		return tw.Flush()
	case "revoke":
		var r struct {
			Revoked []string `json:"revoked"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			return fmt.Errorf("read the answer: %w", err)
		}
		if len(r.Revoked) == 0 {
			fmt.Fprintln(o.stdout, "no keys revoked")
		} else {
			fmt.Fprintln(o.stdout, "revoked "+strings.Join(r.Revoked, " "))
		}
	}
	return nil
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
