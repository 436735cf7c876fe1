package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Real ggml-rpc-server passes -H through inet_addr(3) (create_server_socket in
// ggml-rpc.cpp): IPv4 numbers-and-dots only, with glibc's short and based forms.
func TestInetAddrLikeGlibc(t *testing.T) {
	tests := []struct {
		name   string
		host   string
		want   [4]byte
		wantOK bool
	}{
		{name: "dotted quad", host: "127.0.0.1", want: [4]byte{127, 0, 0, 1}, wantOK: true},
		{name: "any", host: "0.0.0.0", want: [4]byte{}, wantOK: true},
		{name: "two parts", host: "127.1", want: [4]byte{127, 0, 0, 1}, wantOK: true},
		{name: "three parts", host: "10.1.258", want: [4]byte{10, 1, 1, 2}, wantOK: true},
		{name: "one number", host: "2130706433", want: [4]byte{127, 0, 0, 1}, wantOK: true},
		{name: "hex and octal", host: "0x7f.0.0.01", want: [4]byte{127, 0, 0, 1}, wantOK: true},
		{name: "trailing space and junk", host: "10.0.0.1 x", want: [4]byte{10, 0, 0, 1}, wantOK: true},
		{name: "host name", host: "localhost", wantOK: false},
		{name: "IPoIB name", host: "node1-ib", wantOK: false},
		{name: "IPv6 loopback", host: "::1", wantOK: false},
		{name: "empty", host: "", wantOK: false},
		{name: "broadcast is INADDR_NONE", host: "255.255.255.255", wantOK: false},
		{name: "part over 255", host: "256.0.0.1", wantOK: false},
		{name: "five parts", host: "1.2.3.4.5", wantOK: false},
		{name: "trailing dot", host: "1.2.3.", wantOK: false},
		{name: "bad octal digit", host: "08.0.0.1", wantOK: false},
		{name: "last part too big", host: "1.2.65536", wantOK: false},
		{name: "leading space", host: " 1.2.3.4", wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := inetAddr(tt.host)
			if ok != tt.wantOK {
				t.Fatalf("inetAddr(%q) ok = %v, want %v", tt.host, ok, tt.wantOK)
			}
			if diff := cmp.Diff(tt.want, got); ok && diff != "" {
				t.Errorf("inetAddr(%q) (-want +got):\n%s", tt.host, diff)
			}
		})
	}
}

// Real rpc-server given a name or an IPv6 literal for -H prints "Invalid host
// address: HOST" and "Failed to create server socket" to stderr, and its main
// returns 0: it never listens.
func TestRPCServerRejectsNonIPv4Host(t *testing.T) {
	for _, host := range []string{"node1-ib", "localhost", "::1"} {
		t.Run(host, func(t *testing.T) {
			w := start(t, "rpc-server", "-H", host, "-p", "0")
			if code := w.waitExit(t); code != 0 {
				t.Errorf("exit code = %d, want 0 (real main returns 0)", code)
			}
			out := w.out.String()
			for _, want := range []string{"Invalid host address: " + host + "\n", "Failed to create server socket\n"} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}
