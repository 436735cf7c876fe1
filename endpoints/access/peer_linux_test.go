package access

import (
	"bufio"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// A /proc/net/tcp as Linux 6.1 prints it: the front door listening on
// 127.0.0.1:8090 (uid 998), tailscaled's connection to it from port 43122
// (uid 0), the front door's end of it, and a user's (1001) to it from 43130.
const procNetTCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F9A 00000000:0000 0A 00000000:00000000 00:00000000 00000000   998        0 21915 1 0000000000000000 100 0 0 10 0
   1: 0100007F:A872 0100007F:1F9A 01 00000000:00000000 00:00000000 00000000     0        0 35121 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:1F9A 0100007F:A872 01 00000000:00000000 00:00000000 00000000   998        0 35122 1 0000000000000000 20 4 29 10 -1
   3: 0100007F:A87A 0100007F:1F9A 01 00000000:00000000 00:00000000 00000000  1001        0 35130 1 0000000000000000 20 4 30 10 -1
`

func TestFindOwner(t *testing.T) {
	door := netip.MustParseAddrPort("127.0.0.1:8090")
	for _, tt := range []struct {
		name    string
		remote  string
		want    uint32
		wantErr error
	}{
		{name: "tailscaled", remote: "127.0.0.1:43122", want: 0},
		{name: "a user", remote: "127.0.0.1:43130", want: 1001},
		{name: "not on this host", remote: "10.77.0.11:43122", wantErr: errNoSocket},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := findOwner(bufio.NewScanner(strings.NewReader(procNetTCP)), door, netip.MustParseAddrPort(tt.remote))
			if !errors.Is(err, tt.wantErr) || (err == nil && got != tt.want) {
				t.Errorf("owner %d, %v; want %d, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
	// IPv6: ::1 port 8090 as the kernel prints it.
	a, err := parseProcAddr("00000000000000000000000001000000:1F9A")
	if err != nil || a != netip.MustParseAddrPort("[::1]:8090") {
		t.Errorf("parseProcAddr(::1) = %v, %v", a, err)
	}
	a, err = parseProcAddr("0000000000000000FFFF00000100007F:1F9A")
	if err != nil || a != netip.MustParseAddrPort("127.0.0.1:8090") {
		t.Errorf("parseProcAddr(::ffff:127.0.0.1) = %v, %v", a, err)
	}
}

// TestIdentityOnlyFromTailscaledsAccount (issue 37, defect 7): with two
// local users, only the connection of the trusted account (root, as
// tailscaled runs) has its Tailscale-User-Login believed; another user
// with a shell on the controller who connects to 127.0.0.1 with the same
// headers is anonymous. Real sockets, the real socket table.
func TestIdentityOnlyFromTailscaledsAccount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a second local user's connection is made as nobody")
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl is not installed (apt-get install curl)")
	}
	id := NewIdentifier(IdentifyConfig{Mode: ModeIdentify, TrustedProxies: mustPrefixes(t, "127.0.0.1"),
		TrustedProxyUsers: []string{"root"}}, nil, nil, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, err := id.Identify(r)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Write([]byte(got.User + "|" + string(got.Source)))
	}))
	defer srv.Close()
	ask := func(uid uint32) string {
		t.Helper()
		cmd := exec.Command(curl, "-sS", "--max-time", "10", "-H", "Tailscale-User-Login: alice@example.com", srv.URL)
		if uid != 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("curl as uid %d: %v %s", uid, err, out)
		}
		return string(out)
	}
	if got := ask(0); got != "alice@example.com|tailscale" {
		t.Errorf("from root (tailscaled's account): %q, want the login believed", got)
	}
	if got := ask(65534); got != "|" {
		t.Errorf("from nobody: %q, want anonymous", got)
	}
}

func mustPrefixes(t *testing.T, s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		p, err := parseProxy(x)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}
