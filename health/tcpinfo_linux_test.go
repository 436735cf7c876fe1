package health

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func TestSilentPeers(t *testing.T) {
	w1, w2 := netip.MustParseAddrPort("10.78.0.2:50052"), netip.MustParseAddrPort("10.78.0.3:50052")
	conn := func(d netip.AddrPort, unacked uint32, retrans uint8) TCPConn {
		return TCPConn{Src: netip.MustParseAddrPort("10.78.0.1:40000"), Dst: d, Unacked: unacked, Retransmits: retrans}
	}
	tests := []struct {
		name  string
		conns []TCPConn
		want  []netip.AddrPort
	}{
		{name: "all acknowledged: a slow batch is not silence", conns: []TCPConn{conn(w1, 0, 0), conn(w2, 0, 0)}},
		{name: "in flight, acknowledged soon", conns: []TCPConn{conn(w1, 3, 0)}},
		{name: "a lost packet or two: a working lossy link", conns: []TCPConn{conn(w1, 1, SilentRetransmits-1)}},
		{name: "retransmitted in a row, nothing acknowledged: silent", conns: []TCPConn{conn(w1, 0, 0), conn(w2, 2, SilentRetransmits)},
			want: []netip.AddrPort{w2}},
		{name: "another peer's silence is not a worker's",
			conns: []TCPConn{conn(netip.MustParseAddrPort("10.78.0.9:50052"), 2, 9)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.want, SilentPeers(tt.conns, []netip.AddrPort{w1, w2}), cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); d != "" {
				t.Errorf("silent peers (-want +got):\n%s", d)
			}
		})
	}
}

// TestTCPConnsSeesALoopbackConnection reads this process's own connection
// back from the kernel (sock_diag) with its tcp_info: established, and
// once what was sent is read by the peer, nothing unacknowledged.
func TestTCPConnsSeesALoopbackConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer := <-accepted
	defer peer.Close()
	c.Write([]byte("hello"))
	dst := netip.MustParseAddrPort(ln.Addr().String())
	src := netip.MustParseAddrPort(c.LocalAddr().String())
	deadline := time.Now().Add(5 * time.Second)
	for {
		conns, err := TCPConns()
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range conns {
			if x.Src == src && x.Dst == dst && x.Unacked == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the connection %s → %s is not listed acknowledged: %+v", src, dst, conns)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTCPConnsSeesASilentPeer: a connection to a peer in a network
// namespace of its own, over a veth pair. While the peer's kernel answers,
// data its process never reads is acknowledged (a long prompt batch is not
// silence); once the link is cut (the peer's end down, both processes
// alive), data sent is retransmitted unacknowledged and SilentPeers names
// the peer within seconds (issue 21, item 6: a completion sent during such
// a cut hung 121.6 s, until timeouts.stall).
func TestTCPConnsSeesASilentPeer(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2)")
	}
	suffix := strconv.Itoa(os.Getpid() % 100000)
	ns, hostEnd, peerEnd := "sl-tcpi-"+suffix, "sltA"+suffix, "sltB"+suffix
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	ip("netns", "add", ns)
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", hostEnd).Run()
		exec.Command("ip", "netns", "del", ns).Run()
	})
	ip("link", "add", hostEnd, "type", "veth", "peer", "name", peerEnd)
	ip("link", "set", peerEnd, "netns", ns)
	ip("addr", "add", "10.250.77.1/30", "dev", hostEnd)
	ip("link", "set", hostEnd, "up")
	ip("-n", ns, "addr", "add", "10.250.77.2/30", "dev", peerEnd)
	ip("-n", ns, "link", "set", peerEnd, "up")
	ip("-n", ns, "link", "set", "lo", "up")

	ln := listenIn(t, ns, "10.250.77.2:0")
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c // never read: the peer process is busy
		}
	}()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer := <-accepted
	defer peer.Close()
	dst := netip.MustParseAddrPort(ln.Addr().String())
	silent := func() bool {
		conns, err := TCPConns()
		if err != nil {
			t.Fatal(err)
		}
		return len(SilentPeers(conns, []netip.AddrPort{dst})) > 0
	}
	c.Write(make([]byte, 1000))
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if silent() {
			t.Fatal("a peer whose process does not read, but whose kernel acknowledges, was taken for silent")
		}
	}
	ip("-n", ns, "link", "set", peerEnd, "down")
	cut := time.Now()
	c.Write(make([]byte, 1000))
	for !silent() {
		if time.Since(cut) > 20*time.Second {
			t.Fatal("the cut link was not seen silent within 20 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("silent link seen %s after the cut and the send", time.Since(cut).Round(time.Millisecond))
}

// listenIn listens on addr inside network namespace ns: the socket is made
// by a thread moved into ns for the call, then moved back.
func listenIn(t *testing.T, ns, addr string) net.Listener {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	target, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		t.Fatal(err)
	}
	ln, lerr := net.Listen("tcp", addr)
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		panic("cannot return to the test's network namespace: " + err.Error()) // the thread would be unusable
	}
	if lerr != nil {
		t.Fatal(lerr)
	}
	return ln
}

// BenchmarkTCPConns is the cost of one silent-link check's read of the
// node's TCP connections (the supervisor makes one every 500 ms while a
// distributed tier's head runs): reported with 20 established loopback
// connections beside the benchmark's.
func BenchmarkTCPConns(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	for i := 0; i < 20; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := TCPConns(); err != nil {
			b.Fatal(err)
		}
	}
}
