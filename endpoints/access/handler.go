package access

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"slurm-llm/endpoints/access/munge"
)

// KeysPath is the key endpoint: the front door routes this path (before
// it asks Identify: a user with no key yet comes here for one) to
// KeyHandler. Every request carries a munge credential in
// "Authorization: MUNGE <credential>" whose payload is a KeyRequest:
//
//	POST   KeysPath  {"op":"create", "account":…, "ttl":…, "note":…}  201 KeyCreated (the key, shown once)
//	GET    KeysPath  {"op":"list", "all":…}                             200 {"keys": [KeyInfo…]}
//	DELETE KeysPath  {"op":"revoke", "id":… | "user":…}                 200 {"revoked": [ids]}
//
// The request's meaning travels inside the credential, so munge
// authenticates all of it (who, what, which key), not only who. Errors
// are OpenAI's error document.
const KeysPath = "/v1/slurm-llm/keys"

// KeyAudience is a KeyRequest's aud: a credential made for anything else
// (another service's) is not taken here.
const KeyAudience = "slurm-llm/keys/v1"

// MaxKeysPerUser bounds the keys one user holds at once.
const MaxKeysPerUser = 32

// KeyRequest is the payload of the credential a client sends.
type KeyRequest struct {
	Aud string `json:"aud"`
	// Op is create, list or revoke (POST, GET, DELETE).
	Op string `json:"op"`
	// Account (create) asks for another of the user's Slurm accounts
	// than the default; TTL (create) a shorter life than key_ttl ("720h").
	Account string `json:"account,omitempty"`
	TTL     string `json:"ttl,omitempty"`
	// Note (create) is the user's own name for the key.
	Note string `json:"note,omitempty"`
	// All (list) lists every user's keys (admins only).
	All bool `json:"all,omitempty"`
	// ID (revoke) names one key; User (revoke) every key of a user (one's
	// own, or anyone's for an admin).
	ID   string `json:"id,omitempty"`
	User string `json:"user,omitempty"`
	// To is the front door's URL the client sent it to. A credential made
	// for a loopback URL is good only on a direct connection from this
	// host's loopback (no proxy's X-Forwarded-For: tailscale serve and the
	// shipped nginx site add one): one a node's user captured by listening
	// on the node's own 127.0.0.1 and replayed here is refused.
	To string `json:"to,omitempty"`
}

// KeyInfo is a key as listed: never the key or its hash.
type KeyInfo struct {
	ID      string    `json:"id"`
	User    string    `json:"user"`
	Account string    `json:"account"`
	Note    string    `json:"note,omitempty"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
}

// KeyCreated is create's answer: the key itself, this once.
type KeyCreated struct {
	KeyInfo
	Key string `json:"key"`
}

// CredentialVerifier decodes a munge credential (munge.Verifier).
type CredentialVerifier interface {
	Verify(ctx context.Context, cred []byte) (munge.Credential, error)
}

// KeyHandlerOptions are what KeyHandler needs; zero fields get defaults
// where they have one.
type KeyHandlerOptions struct {
	Store    *Store
	Verifier CredentialVerifier // munge.Verifier{}
	Accounts *Accounts          // required
	Users    Users              // OSUsers{}
	// AdminGroup's members (and root) list and revoke anyone's keys; ""
	// means root only.
	AdminGroup string
	// KeyTTL is a key's life, and the longest a client may ask (90 days).
	KeyTTL time.Duration
	// Rate and Burst bound each user's requests, counted once unmunge
	// has said who sent them: per second (1), and at once (5). A request
	// that is not even a credential costs nothing and spends nothing.
	Rate  float64
	Burst int
	// UnmungeRate and UnmungeBurst bound the unmunge runs of all requests
	// together (what a flood of forged credentials costs the host): per
	// second (50) and at once (50). Past them a 429 for everyone, so they
	// sit well above what users make keys at.
	UnmungeRate  float64
	UnmungeBurst int
	Now          func() time.Time
	Rand         io.Reader // crypto/rand
	Log          hclog.Logger
	// Replays is the replay guard; handlers over one store must share one
	// (a credential taken on one must be refused on the other). nil: the
	// handler's own.
	Replays *ReplayGuard
}

// ReplayGuard remembers the credentials taken, until they expire: munged
// refuses a credential decoded twice too, but forgets when it restarts.
// Safe for concurrent use; its zero value is ready.
type ReplayGuard struct {
	mu   sync.Mutex
	seen map[[32]byte]time.Time
}

// KeyHandler serves KeysPath. Safe for concurrent use.
type KeyHandler struct {
	o       KeyHandlerOptions
	unmunge *rate.Limiter // unmunge runs, all requests together
	counts  *prometheus.CounterVec
	mu      sync.Mutex
	users   map[uint32]*userBucket // each uid's requests
}

// userBucket is one uid's limiter and when it was last used (buckets
// full again for a while are dropped).
type userBucket struct {
	lim  *rate.Limiter
	last time.Time
}

// NewKeyHandler returns the key endpoint.
func NewKeyHandler(o KeyHandlerOptions) *KeyHandler {
	if o.Verifier == nil {
		o.Verifier = munge.Verifier{}
	}
	if o.Users == nil {
		o.Users = OSUsers{}
	}
	if o.KeyTTL <= 0 {
		o.KeyTTL = 90 * 24 * time.Hour
	}
	if o.Rate <= 0 {
		o.Rate = 1
	}
	if o.Burst <= 0 {
		o.Burst = 5
	}
	if o.UnmungeRate <= 0 {
		o.UnmungeRate = 50
	}
	if o.UnmungeBurst <= 0 {
		o.UnmungeBurst = 50
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = hclog.NewNullLogger()
	}
	h := &KeyHandler{o: o, unmunge: rate.NewLimiter(rate.Limit(o.UnmungeRate), o.UnmungeBurst),
		users: map[uint32]*userBucket{}}
	if h.o.Replays == nil {
		h.o.Replays = &ReplayGuard{}
	}
	h.counts = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_front_key_requests_total",
		Help: "Requests to the key endpoint by operation (create, list, revoke, other) and result (ok, refused, limited, unavailable)."},
		[]string{"op", "result"})
	return h
}

// Collector is the endpoint's counter, for the front door's registry.
func (h *KeyHandler) Collector() prometheus.Collector { return h.counts }

// keyCall is one request to the endpoint as it is answered.
type keyCall struct {
	w      http.ResponseWriter
	op     string
	result string
}

// fail answers an error and notes the result for the counter.
func (c *keyCall) fail(status int, code, msg string) {
	c.result = "refused"
	switch status {
	case http.StatusTooManyRequests:
		c.result = "limited"
	case http.StatusServiceUnavailable, http.StatusInternalServerError:
		c.result = "unavailable"
	}
	WriteError(c.w, status, msg, "invalid_request_error", code)
}

func (c *keyCall) ok(status int, v any) {
	c.result = "ok"
	c.w.Header().Set("Content-Type", "application/json")
	c.w.Header().Set("Cache-Control", "no-store")
	c.w.WriteHeader(status)
	b, _ := json.MarshalIndent(v, "", "  ")
	_, _ = c.w.Write(append(b, '\n'))
}

// ServeHTTP answers one key request.
func (h *KeyHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := &keyCall{w: w, op: "other"}
	defer func() { h.counts.WithLabelValues(c.op, c.result).Inc() }()
	if r.URL.Path != KeysPath {
		c.fail(http.StatusNotFound, "not_found", "unknown path: the key endpoint is "+KeysPath)
		return
	}
	now := h.o.Now()
	uid, req, ok := h.authenticate(c, r, now)
	if !ok {
		return
	}
	c.op = req.Op
	name, err := h.o.Users.Name(uid)
	if err != nil {
		h.o.Log.Warn("key request from a uid with no user name", "uid", uid, "error", err)
		c.fail(http.StatusForbidden, "unknown_user", fmt.Sprintf("uid %d has no user name on the front door's host", uid))
		return
	}
	switch req.Op {
	case "create":
		h.create(r.Context(), c, req, name, uid, now)
	case "list":
		h.list(c, req, name, uid)
	case "revoke":
		h.revoke(c, req, name, uid)
	}
}

// methods are the operation each method carries.
var methods = map[string]string{http.MethodPost: "create", http.MethodGet: "list", http.MethodDelete: "revoke"}

// authenticate verifies the request's credential and reads its payload;
// it answers the client itself when ok is false.
func (h *KeyHandler) authenticate(c *keyCall, r *http.Request, now time.Time) (uint32, KeyRequest, bool) {
	op, known := methods[r.Method]
	if !known {
		c.fail(http.StatusMethodNotAllowed, "invalid_request", "use POST (create), GET (list) or DELETE (revoke)")
		return 0, KeyRequest{}, false
	}
	scheme, cred, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !strings.EqualFold(scheme, "MUNGE") || cred == "" {
		c.fail(http.StatusUnauthorized, "invalid_munge_credential", "send a munge credential: Authorization: MUNGE <credential> (llm-upstreams key does it)")
		return 0, KeyRequest{}, false
	}
	// What costs nothing comes first: a request that is not a credential
	// spends no limiter, so nobody can shut the endpoint with bare requests.
	if err := munge.CheckArmor([]byte(cred)); err != nil {
		h.refuseCredential(c, err)
		return 0, KeyRequest{}, false
	}
	if !h.allow(c, h.unmunge, now) {
		return 0, KeyRequest{}, false
	}
	mc, err := h.o.Verifier.Verify(r.Context(), []byte(cred))
	if err == nil {
		err = h.remember([]byte(cred), mc, now)
	}
	if err != nil {
		h.refuseCredential(c, err)
		return 0, KeyRequest{}, false
	}
	if !h.allow(c, h.userLimiter(mc.UID, now), now) {
		return 0, KeyRequest{}, false
	}
	req, err := parseKeyRequest(mc.Payload)
	if err == nil && req.Op != op {
		err = fmt.Errorf("the credential asks to %s, the request is a %s", req.Op, r.Method)
	}
	if err != nil {
		c.fail(http.StatusBadRequest, "invalid_request", err.Error())
		return 0, KeyRequest{}, false
	}
	if fwd := r.Header.Get("X-Forwarded-For"); loopbackURL(req.To) && (!loopbackPeer(r.RemoteAddr) || fwd != "") {
		// Made for a loopback URL and not from this host's loopback: a
		// credential another user of a node took by listening on the node's
		// own 127.0.0.1, or one sent there by mistake: either way not for us.
		h.o.Log.Warn("key request with a credential made for a loopback URL from elsewhere: refused",
			"uid", mc.UID, "to", cut(req.To, 128), "remote", r.RemoteAddr, "forwarded_for", cut(fwd, 64))
		c.fail(http.StatusUnauthorized, "credential_for_another_door",
			"the credential was made for "+cut(req.To, 128)+", a loopback address of the host that made it, not this front door: run llm-upstreams key with --url set to this front door's URL")
		return 0, KeyRequest{}, false
	}
	return mc.UID, req, true
}

// refuseCredential answers a credential munge or the replay guard refused.
func (h *KeyHandler) refuseCredential(c *keyCall, err error) {
	switch {
	case errors.Is(err, munge.ErrReplayed):
		c.fail(http.StatusUnauthorized, "replayed_credential", "the munge credential was used before: each is good once, make a new one")
	case errors.Is(err, munge.ErrExpired):
		c.fail(http.StatusUnauthorized, "expired_credential", "the munge credential has expired (or its host's clock is off): make a new one")
	case errors.Is(err, munge.ErrUnavailable):
		h.o.Log.Error("cannot verify munge credentials", "error", err)
		c.fail(http.StatusServiceUnavailable, "munge_unavailable", "the front door cannot verify munge credentials now; try again later")
	default:
		c.fail(http.StatusUnauthorized, "invalid_munge_credential", "not a valid munge credential of this cluster")
	}
}

// allow takes one token of lim, or answers 429 with the wait.
func (h *KeyHandler) allow(c *keyCall, lim *rate.Limiter, now time.Time) bool {
	res := lim.ReserveN(now, 1)
	if wait := res.DelayFrom(now); wait > 0 {
		res.CancelAt(now)
		c.w.Header().Set("Retry-After", RetryAfter(wait))
		c.fail(http.StatusTooManyRequests, CodeRateLimited, "the key endpoint is busy: retry after the time in Retry-After")
		return false
	}
	return true
}

// userLimiter is uid's bucket (Rate, Burst); buckets unused for an hour
// are dropped as it goes (they are full again by then).
func (h *KeyHandler) userLimiter(uid uint32, now time.Time) *rate.Limiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	for u, b := range h.users {
		if now.Sub(b.last) > time.Hour {
			delete(h.users, u)
		}
	}
	b := h.users[uid]
	if b == nil {
		b = &userBucket{lim: rate.NewLimiter(rate.Limit(h.o.Rate), h.o.Burst)}
		h.users[uid] = b
	}
	b.last = now
	return b.lim
}

// remember refuses a credential taken before (munged refuses it too, but
// forgets when it restarts) and keeps it until it expires. It keys on the
// credential's decoded bytes: another spelling of the same base64 is the
// same credential to munge.
func (h *KeyHandler) remember(cred []byte, mc munge.Credential, now time.Time) error {
	raw, err := munge.Decode(cred)
	if err != nil {
		return err
	}
	return h.o.Replays.take(sha256.Sum256(raw), mc.Encoded.Add(mc.TTL).Add(time.Minute), now) // a minute for clocks apart
}

// take records a credential's sum until it expires, or refuses one seen.
func (g *ReplayGuard) take(sum [32]byte, until, now time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.seen == nil {
		g.seen = map[[32]byte]time.Time{}
	}
	for k, u := range g.seen {
		if now.After(u) {
			delete(g.seen, k)
		}
	}
	if _, dup := g.seen[sum]; dup {
		return fmt.Errorf("%w (seen by the front door)", munge.ErrReplayed)
	}
	g.seen[sum] = until
	return nil
}

// loopbackURL reports whether u's host is a loopback address or
// localhost.
func loopbackURL(u string) bool {
	p, err := url.Parse(u)
	return err == nil && p.Host != "" && LoopbackHost(p.Hostname())
}

// LoopbackHost reports whether host names this machine's own loopback:
// localhost (or a name under .localhost) or a loopback address. The key
// command refuses to send a credential to one it was not told, and the key
// endpoint believes a credential made for one only from its own loopback:
// both ask this, so they agree on what is local.
func LoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackPeer reports whether a connection's remote address is a
// loopback one.
func loopbackPeer(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// maxPayload bounds a KeyRequest.
const maxPayload = 1024

// parseKeyRequest reads a credential's payload strictly.
func parseKeyRequest(p []byte) (KeyRequest, error) {
	var req KeyRequest
	if len(p) > maxPayload {
		return req, fmt.Errorf("the credential's payload is over %d bytes", maxPayload)
	}
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("the credential's payload is not a key request: %v", err)
	}
	if dec.More() {
		return req, errors.New("the credential's payload has data after the key request")
	}
	if req.Aud != KeyAudience {
		return req, fmt.Errorf("the credential is not for this endpoint (aud %q, want %q)", cut(req.Aud, 64), KeyAudience)
	}
	if len(req.Note) > 64 || !printable(req.Note) {
		return req, errors.New("note: want at most 64 printable bytes")
	}
	for _, n := range []struct{ what, v string }{{"account", req.Account}, {"user", req.User}} {
		if n.v != "" && !ValidName(n.v) {
			return req, fmt.Errorf("%s %q: not a name", n.what, cut(n.v, 64))
		}
	}
	return req, nil
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// admin reports whether the user may see and revoke anyone's keys.
func (h *KeyHandler) admin(name string, uid uint32) bool {
	if uid == 0 {
		return true
	}
	if h.o.AdminGroup == "" {
		return false
	}
	in, err := h.o.Users.InGroup(name, h.o.AdminGroup)
	if err != nil {
		h.o.Log.Warn("cannot tell whether a user is an admin", "user", name, "group", h.o.AdminGroup, "error", err)
	}
	return in
}

// create issues a key to the user.
func (h *KeyHandler) create(ctx context.Context, c *keyCall, req KeyRequest, name string, uid uint32, now time.Time) {
	ttl := h.o.KeyTTL
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d <= 0 || d > h.o.KeyTTL {
			c.fail(http.StatusBadRequest, "invalid_request", fmt.Sprintf("ttl %q: want a duration up to key_ttl (%s)", cut(req.TTL, 32), h.o.KeyTTL))
			return
		}
		ttl = d
	}
	account, ok := h.account(ctx, c, name, req.Account)
	if !ok {
		return
	}
	if n := len(h.o.Store.List(name)); n >= MaxKeysPerUser {
		c.fail(http.StatusConflict, "too_many_keys", fmt.Sprintf("you have %d keys, the most one user holds: revoke one first", n))
		return
	}
	key, id, hash, err := NewKey(h.o.Rand)
	if err == nil {
		err = h.o.Store.Add(Key{ID: id, Hash: hash, User: name, UID: uid, Account: account, Note: req.Note,
			Created: now.UTC(), Expires: now.Add(ttl).UTC()})
	}
	if err != nil {
		h.o.Log.Error("cannot store a key", "user", name, "error", err)
		c.fail(http.StatusInternalServerError, "store_failed", "the front door could not store the key")
		return
	}
	h.o.Log.Info("key created", "user", name, "uid", uid, "account", account, "id", id, "expires", now.Add(ttl).UTC())
	c.ok(http.StatusCreated, KeyCreated{KeyInfo: KeyInfo{ID: id, User: name, Account: account, Note: req.Note,
		Created: now.UTC(), Expires: now.Add(ttl).UTC()}, Key: key})
}

// account is the account a new key of name's counts under (answering
// the client itself when ok is false).
func (h *KeyHandler) account(ctx context.Context, c *keyCall, name, override string) (string, bool) {
	if h.o.Accounts == nil || h.o.Accounts.opts.Disabled {
		if override != "" {
			c.fail(http.StatusBadRequest, "invalid_request", "the front door does not ask Slurm for accounts here (slurm_accounts = false): no account can be chosen")
			return "", false
		}
		return "", true
	}
	ua, err := h.o.Accounts.Lookup(ctx, name)
	switch {
	case errors.Is(err, ErrNoAccount):
		c.fail(http.StatusForbidden, "no_slurm_account", fmt.Sprintf("user %s has no Slurm account: ask the cluster's admins for one", name))
		return "", false
	case err != nil:
		h.o.Log.Error("cannot look up Slurm accounts", "user", name, "error", err)
		c.fail(http.StatusServiceUnavailable, "slurm_unavailable", "the front door cannot ask Slurm for your account now; try again later")
		return "", false
	}
	account, err := ua.Choose(override)
	if err != nil {
		c.fail(http.StatusForbidden, "invalid_account", err.Error())
		return "", false
	}
	return account, true
}

// list answers the user's keys, or everyone's for an admin asking all.
func (h *KeyHandler) list(c *keyCall, req KeyRequest, name string, uid uint32) {
	who := name
	if req.All {
		if !h.admin(name, uid) {
			c.fail(http.StatusForbidden, "forbidden", "only root and the admin group list everyone's keys")
			return
		}
		who = ""
	}
	out := []KeyInfo{}
	for _, k := range h.o.Store.List(who) {
		out = append(out, KeyInfo{ID: k.ID, User: k.User, Account: k.Account, Note: k.Note, Created: k.Created, Expires: k.Expires})
	}
	c.ok(http.StatusOK, map[string]any{"keys": out})
}

// revoke removes one key (the user's own, or anyone's for an admin) or
// every key of a user.
func (h *KeyHandler) revoke(c *keyCall, req KeyRequest, name string, uid uint32) {
	if (req.ID == "") == (req.User == "") {
		c.fail(http.StatusBadRequest, "invalid_request", "revoke: name a key (id) or a user (user), one of them")
		return
	}
	admin := h.admin(name, uid)
	if req.User != "" && req.User != name && !admin {
		c.fail(http.StatusForbidden, "forbidden", "only root and the admin group revoke another user's keys")
		return
	}
	var ids []string
	_, err := h.o.Store.Revoke(func(k Key) bool {
		match := (req.ID != "" && k.ID == req.ID && (k.User == name || admin)) || (req.User != "" && k.User == req.User)
		if match {
			ids = append(ids, k.ID)
		}
		return match
	})
	if err != nil {
		h.o.Log.Error("cannot store the keys", "user", name, "error", err)
		c.fail(http.StatusInternalServerError, "store_failed", "the front door could not store the change")
		return
	}
	if req.ID != "" && len(ids) == 0 {
		c.fail(http.StatusNotFound, "not_found", fmt.Sprintf("no key %s of yours", cut(req.ID, 32)))
		return
	}
	slices.Sort(ids)
	h.o.Log.Info("keys revoked", "by", name, "uid", uid, "ids", ids, "user", req.User)
	c.ok(http.StatusOK, map[string]any{"revoked": append([]string{}, ids...)})
}
