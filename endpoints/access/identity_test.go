package access

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestIdentify(t *testing.T) {
	store, _ := OpenStore("", func() time.Time { return t0 })
	key, id, hash, _ := NewKey(fixedRand(3))
	store.Add(Key{ID: id, Hash: hash, User: "alice", Account: "chem", Created: t0, Expires: t0.Add(time.Hour)})
	revoked, rid, rhash, _ := NewKey(fixedRand(4))
	store.Add(Key{ID: rid, Hash: rhash, User: "bob", Created: t0, Expires: t0.Add(time.Hour)})
	store.Revoke(func(k Key) bool { return k.ID == rid })
	const svcKey = "a-service-account-key-of-32-bytes-or-more"
	static := []StaticKey{{User: "svc-bot", Account: "ops", Hash: HashKey(svcKey), Line: 1}}
	local, _ := ParseProxies([]string{"127.0.0.1", "::1"})
	accounts := func(u string) string { return map[string]string{"carol": "phys"}[u] }

	tests := []struct {
		name    string
		mode    Mode
		peer    string
		headers map[string]string
		want    Identity
		wantErr bool
		// kept: the headers still on the request after Identify
		kept []string
	}{
		{name: "off: anonymous even with a key", mode: ModeOff, peer: "10.0.0.5:1",
			headers: map[string]string{"Authorization": "Bearer " + key, "Tailscale-User-Login": "x@y"}, kept: []string{"Authorization"}},
		{name: "an issued key", mode: ModeIdentify, peer: "10.0.0.5:1", headers: map[string]string{"Authorization": "Bearer " + key},
			want: Identity{User: "alice", Account: "chem", Source: SourceKey, KeyID: id}},
		{name: "bearer is case-blind", mode: ModeRequired, peer: "10.0.0.5:1", headers: map[string]string{"Authorization": "bearer  " + key},
			want: Identity{User: "alice", Account: "chem", Source: SourceKey, KeyID: id}},
		{name: "a key wins over a trusted Tailscale identity", mode: ModeIdentify, peer: "127.0.0.1:5",
			headers: map[string]string{"Authorization": "Bearer " + key, "Tailscale-User-Login": "mallory@example.com"},
			want:    Identity{User: "alice", Account: "chem", Source: SourceKey, KeyID: id}},
		{name: "a static key", mode: ModeRequired, peer: "10.0.0.5:1", headers: map[string]string{"Authorization": "Bearer " + svcKey},
			want: Identity{User: "svc-bot", Account: "ops", Source: SourceStatic}},
		{name: "a revoked key is refused in identify mode too", mode: ModeIdentify, peer: "10.0.0.5:1",
			headers: map[string]string{"Authorization": "Bearer " + revoked}, wantErr: true},
		{name: "an SDK's dummy key is no key", mode: ModeIdentify, peer: "10.0.0.5:1",
			headers: map[string]string{"Authorization": "Bearer sk-no-key-required"}, kept: []string{"Authorization"}},
		{name: "required: a dummy key is refused", mode: ModeRequired, peer: "10.0.0.5:1",
			headers: map[string]string{"Authorization": "Bearer sk-no-key-required"}, wantErr: true, kept: []string{"Authorization"}},
		{name: "required: nothing is refused", mode: ModeRequired, peer: "127.0.0.1:5", wantErr: true},
		{name: "tailscale from the local proxy", mode: ModeRequired, peer: "127.0.0.1:5",
			headers: map[string]string{"Tailscale-User-Login": "dave@example.com", "Tailscale-User-Name": "Dave", "Tailscale-User-Profile-Pic": "https://x"},
			want:    Identity{User: "dave@example.com", Source: SourceTailscale}},
		{name: "tailscale over IPv6 loopback, mapped to a cluster user", mode: ModeIdentify, peer: "[::1]:5",
			headers: map[string]string{"Tailscale-User-Login": "carol@example.com"},
			want:    Identity{User: "carol", Account: "phys", Source: SourceTailscale}},
		{name: "a forged Tailscale header from another peer is ignored and stripped", mode: ModeIdentify, peer: "10.77.0.11:40000",
			headers: map[string]string{"Tailscale-User-Login": "alice@example.com", "Tailscale-User-Name": "Alice"}},
		{name: "required: a forged Tailscale header is no identity", mode: ModeRequired, peer: "10.77.0.11:40000",
			headers: map[string]string{"Tailscale-User-Login": "alice@example.com"}, wantErr: true},
		{name: "a login with a blank is not taken", mode: ModeIdentify, peer: "127.0.0.1:5",
			headers: map[string]string{"Tailscale-User-Login": "a b"}},
		{name: "an IPv4-mapped loopback peer is the loopback", mode: ModeIdentify, peer: "[::ffff:127.0.0.1]:5",
			headers: map[string]string{"Tailscale-User-Login": "dave@example.com"},
			want:    Identity{User: "dave@example.com", Source: SourceTailscale}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i := NewIdentifier(IdentifyConfig{Mode: tt.mode, TrustedProxies: local,
				TailscaleUsers: map[string]string{"carol@example.com": "carol"}}, store, static, accounts)
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			r.RemoteAddr = tt.peer
			for k, v := range tt.headers {
				r.Header.Set(k, v)
			}
			got, err := i.Identify(r)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("identity (-want +got):\n%s", d)
			}
			var kept []string
			for k := range r.Header {
				kept = append(kept, k)
			}
			if d := cmp.Diff(tt.kept, kept); d != "" {
				t.Errorf("headers left (-want +got):\n%s", d)
			}
		})
	}
}

func TestLogFields(t *testing.T) {
	for _, tt := range []struct {
		id   Identity
		want string
	}{
		{Identity{}, "user=- account=- auth=anonymous"},
		{Identity{User: "alice", Account: "chem", Source: SourceKey, KeyID: "0a0a"}, "user=alice account=chem auth=key:0a0a"},
		{Identity{User: "dave@example.com", Source: SourceTailscale}, "user=dave@example.com account=- auth=tailscale"},
	} {
		if got := tt.id.LogFields(); got != tt.want {
			t.Errorf("LogFields = %q, want %q", got, tt.want)
		}
	}
}

func TestParseProxies(t *testing.T) {
	got, err := ParseProxies([]string{"127.0.0.1", "::1", "10.1.2.3/8", "::ffff:127.0.0.2"})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128"),
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.2/32")}
	if d := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); d != "" {
		t.Errorf("ParseProxies (-want +got):\n%s", d)
	}
	if _, err := ParseProxies([]string{"localhost"}); err == nil {
		t.Error("a host name taken")
	}
}

func TestParseStaticKeys(t *testing.T) {
	k1, k2 := strings.Repeat("k", 32), strings.Repeat("q", 40)
	good := "# service accounts\n\nsvc-bot ops " + k1 + "\n  ci-runner - " + k2 + "  \n"
	got, err := ParseStaticKeys("static.keys", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	want := []StaticKey{{User: "svc-bot", Account: "ops", Hash: HashKey(k1), Line: 3}, {User: "ci-runner", Hash: HashKey(k2), Line: 4}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	for _, tt := range []struct{ name, text, want string }{
		{"two fields", "svc ops\n", "static.keys:1: want USER ACCOUNT KEY"},
		{"short key", "svc ops short\n", "static.keys:1: the key is 5 bytes"},
		{"bad user", "-svc ops " + k1 + "\n", "static.keys:1: user"},
		{"bad account", "svc a=b " + k1 + "\n", "static.keys:1: account"},
		{"same key twice", "a - " + k1 + "\nb - " + k1 + "\n", "static.keys:2: the same key as line 1"},
	} {
		_, err := ParseStaticKeys("static.keys", []byte(tt.text))
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q…", tt.name, err, tt.want)
		}
	}
}

// TestLoadStaticKeysRefusesAReadableFile: a keys file others can read is
// refused, naming the file; 0600 and 0640 are taken; a symlink is not
// followed.
func TestLoadStaticKeysRefusesAReadableFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "static.keys")
	os.WriteFile(path, []byte("svc ops "+strings.Repeat("k", 32)+"\n"), 0o644)
	os.Chmod(path, 0o644)
	if _, err := LoadStaticKeys(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("0644: err = %v, want a refusal naming %s", err, path)
	}
	for _, mode := range []os.FileMode{0o600, 0o640} {
		os.Chmod(path, mode)
		if keys, err := LoadStaticKeys(path); err != nil || len(keys) != 1 {
			t.Errorf("%s: %v, %v", mode, keys, err)
		}
	}
	link := filepath.Join(dir, "link.keys")
	os.Symlink(path, link)
	if _, err := LoadStaticKeys(link); err == nil {
		t.Error("a symlink followed")
	}
	if _, err := LoadStaticKeys(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing file: %v", err)
	}
}
