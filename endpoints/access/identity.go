package access

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// Mode is [front.auth] mode: how much the front door asks of a client.
type Mode string

// The modes.
const (
	// ModeOff: no one is identified; every request is anonymous.
	ModeOff Mode = "off"
	// ModeIdentify: a key or a trusted Tailscale identity names the user;
	// a request with neither goes through as anonymous. A key of this
	// package's shape that is not valid (revoked, expired, mistyped) is
	// refused all the same: its sender meant to be someone.
	ModeIdentify Mode = "identify"
	// ModeRequired: a request with no valid key or trusted identity gets
	// 401.
	ModeRequired Mode = "required"
)

// Source says how a request's user was known.
type Source string

// The sources, in the order Identify tries them.
const (
	SourceKey       Source = "key"       // an issued key (munge)
	SourceStatic    Source = "static"    // a service account's key from the static keys file
	SourceTailscale Source = "tailscale" // Tailscale-User-Login from a trusted proxy
	SourceAnonymous Source = "anonymous" // none of them
)

// Identity is who sent a request. The zero value is anonymous.
type Identity struct {
	// User is the cluster user (a key's), a service account (a static
	// key's), or a Tailscale login (mapped to a cluster user when
	// tailscale_users says so); "" when anonymous.
	User string
	// Account is the Slurm account usage is counted under; "" unknown.
	Account string
	// Source says how User was known ("" is anonymous).
	Source Source
	// KeyID names the key used (issued keys only): not secret, for logs.
	KeyID string
}

// Anonymous reports whether nobody is known.
func (id Identity) Anonymous() bool { return id.User == "" }

// LogFields are the access log's words for id: user=, account= and auth=
// ("-" for none); values are names this package checked, never a
// client's raw string or a secret.
func (id Identity) LogFields() string {
	src := string(id.Source)
	if src == "" {
		src = string(SourceAnonymous)
	}
	if id.KeyID != "" {
		src += ":" + id.KeyID
	}
	return fmt.Sprintf("user=%s account=%s auth=%s", orDash(id.User), orDash(id.Account), src)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// IdentifyConfig is what Identify needs from [front.auth].
type IdentifyConfig struct {
	Mode Mode
	// TrustedProxies are the peers whose Tailscale identity headers are
	// believed (tailscale serve on this host: 127.0.0.1, ::1).
	TrustedProxies []netip.Prefix
	// TrustedProxyUsers are the accounts that may own the peer's socket
	// (tailscaled's: root); empty checks no owner.
	TrustedProxyUsers []string
	// TailscaleUsers maps a Tailscale login to the cluster user it is
	// (their keys' user and Slurm account); a login not listed is its own
	// user, with no account.
	TailscaleUsers map[string]string
}

// AccountOf gives a cluster user's default Slurm account without waiting
// (Accounts.Cached); nil means none is known.
type AccountOf func(user string) string

// Identifier attributes requests to users (Identify). Safe for
// concurrent use; SetConfig and SetStaticKeys replace its settings at
// once (a reload).
type Identifier struct {
	cfg     atomic.Pointer[IdentifyConfig]
	store   *Store
	static  atomic.Pointer[[]StaticKey]
	account AccountOf
	// owner gives the uid owning the peer's socket (socketOwner) and
	// users its name (OSUsers): who the proxy is.
	owner func(local, remote netip.AddrPort) (uint32, error)
	users Users
}

// NewIdentifier returns an Identifier over the issued keys in store (nil:
// none) and the static keys; account (nil: none) gives a mapped
// Tailscale user's account.
func NewIdentifier(cfg IdentifyConfig, store *Store, static []StaticKey, account AccountOf) *Identifier {
	if store == nil {
		store, _ = OpenStore("", nil)
	}
	i := &Identifier{store: store, account: account, owner: socketOwner, users: OSUsers{}}
	i.SetConfig(cfg)
	i.SetStaticKeys(static)
	return i
}

// SetConfig replaces the mode, trusted proxies and Tailscale users.
func (i *Identifier) SetConfig(cfg IdentifyConfig) { i.cfg.Store(&cfg) }

// SetStaticKeys replaces the static keys (the file read again).
func (i *Identifier) SetStaticKeys(keys []StaticKey) { i.static.Store(&keys) }

// Mode is the current mode.
func (i *Identifier) Mode() Mode { return i.cfg.Load().Mode }

// Unauthorized is Identify's refusal: answer it with WriteUnauthorized.
type Unauthorized struct{ Msg string }

func (u *Unauthorized) Error() string { return u.Msg }

// MaxLoginLen bounds a Tailscale login taken from a header.
const MaxLoginLen = 256

// Identify says who sent r, in order: an API key (Authorization: Bearer),
// a Tailscale identity header from a trusted proxy, else anonymous. It
// takes the identity headers out of r (Tailscale-* always, so that a
// forged one from any other peer never reaches a head or a log; the
// Authorization header when it carried a key of ours), and returns
// *Unauthorized when the request must get 401: a key of ours that is not
// valid, or, in required mode, no identity. In off mode everyone is
// anonymous (the headers are still taken out).
func (i *Identifier) Identify(r *http.Request) (Identity, error) {
	cfg := i.cfg.Load()
	login := tailscaleLogin(r.Header)
	if cfg.Mode == ModeOff || cfg.Mode == "" {
		return Identity{}, nil
	}
	if id, ok, err := i.fromKey(r); ok {
		return id, err
	}
	if login != "" && trusted(cfg.TrustedProxies, r.RemoteAddr) && i.proxyUser(cfg.TrustedProxyUsers, r) {
		id := Identity{User: login, Source: SourceTailscale}
		if u, ok := cfg.TailscaleUsers[login]; ok {
			id.User = u
			if i.account != nil {
				id.Account = i.account(u)
			}
		}
		return id, nil
	}
	if cfg.Mode == ModeRequired {
		return Identity{}, &Unauthorized{Msg: "an API key is required here: make one on a cluster node with `llm-upstreams key create` and send it as Authorization: Bearer KEY"}
	}
	return Identity{}, nil
}

// proxyUser reports whether r's connection comes from a socket of one of
// users (any when users is empty): tailscaled's, not another local
// user's who connected to the loopback with headers of their own.
func (i *Identifier) proxyUser(users []string, r *http.Request) bool {
	if len(users) == 0 {
		return true
	}
	la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	local, err1 := netip.ParseAddrPort(la.String())
	remote, err2 := netip.ParseAddrPort(r.RemoteAddr)
	if err1 != nil || err2 != nil {
		return false
	}
	uid, err := i.owner(local, remote)
	if err != nil {
		return false
	}
	for _, u := range users {
		if u == strconv.FormatUint(uint64(uid), 10) || (uid == 0 && u == "root") {
			return true
		}
	}
	name, err := i.users.Name(uid)
	return err == nil && slices.Contains(users, name)
}

// fromKey looks the request's bearer key up; ok is false when it carries
// none that could be ours (no Authorization, another scheme, a dummy key
// an SDK insists on).
func (i *Identifier) fromKey(r *http.Request) (Identity, bool, error) {
	key, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		return Identity{}, false, nil
	}
	if k, ok := i.store.Lookup(key); ok {
		r.Header.Del("Authorization")
		return Identity{User: k.User, Account: k.Account, Source: SourceKey, KeyID: k.ID}, true, nil
	}
	if sk, ok := matchStatic(*i.static.Load(), key); ok {
		r.Header.Del("Authorization")
		return Identity{User: sk.User, Account: sk.Account, Source: SourceStatic}, true, nil
	}
	if strings.HasPrefix(key, KeyPrefix) {
		r.Header.Del("Authorization")
		return Identity{}, true, &Unauthorized{Msg: "the API key is not valid: it was revoked, has expired or is mistyped; make a new one with `llm-upstreams key create`"}
	}
	return Identity{}, false, nil
}

// bearer is the token of an "Authorization: Bearer TOKEN" header.
func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// tailscaleLogin takes every Tailscale-* header out of h and returns the
// login Tailscale-User-Login carried, "" when none or not a plausible
// login (printable ASCII without blanks, at most MaxLoginLen bytes).
func tailscaleLogin(h http.Header) string {
	login := ""
	if v := h.Values("Tailscale-User-Login"); len(v) == 1 && plausibleLogin(v[0]) {
		login = v[0]
	}
	for k := range h {
		if len(k) >= 10 && strings.EqualFold(k[:10], "Tailscale-") {
			delete(h, k)
		}
	}
	return login
}

func plausibleLogin(s string) bool {
	if s == "" || len(s) > MaxLoginLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// trusted reports whether the peer at remoteAddr (host:port) is in one of
// the prefixes.
func trusted(prefixes []netip.Prefix, remoteAddr string) bool {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return false
	}
	a := ap.Addr().Unmap()
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ParseProxies reads trusted_proxies' entries: addresses ("127.0.0.1",
// "::1") or prefixes ("10.0.0.0/8").
func ParseProxies(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q: want an IP address or a prefix", s)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}
