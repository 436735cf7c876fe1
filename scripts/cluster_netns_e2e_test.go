//go:build e2e

package scripts_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// stateFile is where scripts/slurm-cluster.sh records the mode and the node addresses.
const stateFile = "/run/slurm-llm-cluster/cluster.env"

// helperEnv makes the test binary act as a small TCP tool instead of running tests (see
// TestNetnsHelperProcess); it is run inside a node's namespace with `slurm-cluster.sh exec`.
const helperEnv = "SLURM_LLM_NETNS_HELPER"

// TestNetnsClusterE2E brings the local cluster up in netns mode and checks what the mode
// promises: each node's job steps run in its own namespace with its Ethernet and IPoIB
// addresses, the names resolve, the IPoIB network joins the nodes but not the host, link-cut
// silences a link until link-restore, node-lose takes a node away until node-return, and
// `down` leaves no namespace, link, route, hosts line or daemon behind. The cluster mode that
// was up before the test is brought back afterwards.
func TestNetnsClusterE2E(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the netns cluster needs root")
	}
	for _, b := range []string{"ip", "nft", "nsenter", "srun", "sinfo"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("%s not found (apt-get install -y iproute2 nftables util-linux slurm-wlm): %v", b, err)
		}
	}
	st0 := readClusterState(t)
	prev := st0["mode"]
	if st0["slurm_root"] != "" {
		// Up from another root (make e2e-slurm24): down and up again from it, not from the host.
		t.Setenv("SLURM_ROOT", st0["slurm_root"])
		t.Setenv("SLURM_ROOT_BINDS", st0["slurm_root_binds"])
	}
	t.Cleanup(func() {
		cluster(t, "down")
		switch prev {
		case "loopback":
			cluster(t, "up")
		case "netns":
			cluster(t, "up", "--netns")
		}
	})
	cluster(t, "down")
	cluster(t, "up", "--netns")

	st := readClusterState(t)
	if st["mode"] != "netns" {
		t.Fatalf("%s: mode=%q, want netns", stateFile, st["mode"])
	}
	nodes := strings.Split(st["nodes"], ",")
	if len(nodes) != 3 {
		t.Fatalf("%s: nodes=%q, want 3 nodes", stateFile, st["nodes"])
	}
	for _, n := range nodes {
		for _, k := range []string{"_ns", "_eth", "_ib", "_ib_name", "_addr"} {
			if st[n+k] == "" {
				t.Fatalf("%s lacks %s%s", stateFile, n, k)
			}
		}
		if st[n+"_addr"] != st[n+"_eth"] {
			t.Errorf("%s: NodeAddr %s is not the Ethernet address %s", n, st[n+"_addr"], st[n+"_eth"])
		}
		// The names resolve on the host (the namespaces share /etc/hosts).
		for name, want := range map[string]string{n: st[n+"_eth"], st[n+"_ib_name"]: st[n+"_ib"]} {
			if got, err := net.LookupHost(name); err != nil || len(got) == 0 || got[0] != want {
				t.Errorf("lookup %s = %v, %v; want %s", name, got, err, want)
			}
		}
	}

	t.Run("steps see their node's addresses", func(t *testing.T) {
		for _, n := range nodes {
			out := run(t, 60*time.Second, "srun", "-N1", "-n1", "-w", n, "sh", "-c",
				"echo node=$SLURMD_NODENAME; ip -4 -o addr show; getent hosts "+st[n+"_ib_name"])
			addrs := inetAddrs(out)
			if !strings.Contains(out, "node="+n+"\n") {
				t.Errorf("step on %s ran elsewhere:\n%s", n, out)
			}
			for _, want := range []string{st[n+"_eth"], st[n+"_ib"]} {
				if !addrs[want] {
					t.Errorf("step on %s lacks address %s:\n%s", n, want, out)
				}
			}
			for _, other := range nodes {
				if other != n && (addrs[st[other+"_eth"]] || addrs[st[other+"_ib"]]) {
					t.Errorf("step on %s has %s's addresses:\n%s", n, other, out)
				}
			}
			if !strings.Contains(out, st[n+"_ib"]) || !strings.Contains(out, st[n+"_ib_name"]) {
				t.Errorf("%s does not resolve inside %s:\n%s", st[n+"_ib_name"], n, out)
			}
		}
	})

	t.Run("IPoIB joins the nodes, not the host; link-cut silences it", func(t *testing.T) {
		ibAddr := net.JoinHostPort(st["node2_ib"], "7701")
		ethAddr := net.JoinHostPort(st["node2_eth"], "7702")
		stop := startHelper(t, "node2", "listen", ibAddr+","+ethAddr)
		defer stop()
		if err := dialFromHost(ethAddr); err != nil {
			t.Errorf("host -> node2 Ethernet %s: %v", ethAddr, err)
		}
		if err := dialFromHost(ibAddr); err == nil {
			t.Errorf("host -> node2 IPoIB %s connected; the host must have no way onto that network", ibAddr)
		}
		if out, err := dialFromNode(t, "node3", ibAddr); err != nil {
			t.Errorf("node3 -> node2 IPoIB %s: %v\n%s", ibAddr, err, out)
		}
		cluster(t, "link-cut", "node2", "ib")
		if out, err := dialFromNode(t, "node3", ibAddr); err == nil {
			t.Errorf("node3 -> node2 IPoIB connected while node2's ib link is cut:\n%s", out)
		} else if !strings.Contains(out, "timeout") {
			t.Errorf("node3 -> node2 IPoIB with the link cut: want a silent timeout, got:\n%s", out)
		}
		if out, err := dialFromNode(t, "node1", ethAddr); err != nil {
			t.Errorf("node1 -> node2 Ethernet with only ib cut: %v\n%s", err, out)
		}
		cluster(t, "link-restore", "node2", "ib")
		if out, err := dialFromNode(t, "node3", ibAddr); err != nil {
			t.Errorf("node3 -> node2 IPoIB after link-restore: %v\n%s", err, out)
		}
	})

	t.Run("node-lose and node-return", func(t *testing.T) {
		cluster(t, "node-lose", "node3")
		if nsList(t)["sllm-node3"] {
			t.Errorf("namespace sllm-node3 still exists after node-lose")
		}
		// SlurmdTimeout=10: slurmctld sets the node DOWN (not responding) within about 10-20 s.
		state := waitNodeState(t, "node3", 60*time.Second, func(s string) bool { return strings.HasPrefix(s, "down") })
		t.Logf("node3 after node-lose: %s", state)
		out := cluster(t, "node-return", "node3")
		if !strings.Contains(out, "node3 is back") {
			t.Errorf("node-return did not report node3 back:\n%s", out)
		}
		run(t, 60*time.Second, "srun", "-N1", "-n1", "-w", "node3", "true")
	})

	cluster(t, "down")
	checkNothingLeft(t)
}

// checkNothingLeft fails for anything of netns mode that `down` should have removed.
func checkNothingLeft(t *testing.T) {
	t.Helper()
	for ns := range nsList(t) {
		if strings.HasPrefix(ns, "sllm-") {
			t.Errorf("namespace %s left after down", ns)
		}
	}
	links := run(t, 10*time.Second, "ip", "-o", "link", "show")
	if regexp.MustCompile(`(?m)^\d+: sllm-`).MatchString(links) {
		t.Errorf("links left after down:\n%s", links)
	}
	if routes := run(t, 10*time.Second, "ip", "route", "show"); strings.Contains(routes, "10.77.0.") || strings.Contains(routes, "10.78.0.") {
		t.Errorf("routes left after down:\n%s", routes)
	}
	hosts, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(hosts, []byte("slurm-llm test cluster")) || regexp.MustCompile(`(?m)\snode\d(-ib)?$`).Match(hosts) {
		t.Errorf("/etc/hosts keeps the cluster's names after down:\n%s", hosts)
	}
	if _, err := os.Stat(stateFile); err == nil {
		t.Errorf("%s left after down", stateFile)
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		cmd, err := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		if err == nil && regexp.MustCompile(`^/usr/sbin/slurmd\x00-N\x00node\d`).Match(cmd) {
			t.Errorf("slurmd left after down: pid %s %q", p.Name(), cmd)
		}
	}
}

// cluster runs scripts/slurm-cluster.sh ARGS and fails the test if it fails.
func cluster(t *testing.T, args ...string) string {
	t.Helper()
	return run(t, 3*time.Minute, "./slurm-cluster.sh", args...)
}

// run runs a command with a deadline and returns its combined output; fails the test on error.
func run(t *testing.T, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	out, err := runErr(timeout, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func runErr(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return out.String(), err
}

// readClusterState parses the state file (empty map when there is none).
func readClusterState(t *testing.T) map[string]string {
	t.Helper()
	st := map[string]string{}
	b, err := os.ReadFile(stateFile)
	if os.IsNotExist(err) {
		return st
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(k, "#") {
			st[k] = v
		}
	}
	return st
}

// inetAddrs: the IPv4 addresses in `ip -4 -o addr show` output.
func inetAddrs(out string) map[string]bool {
	m := map[string]bool{}
	for _, f := range regexp.MustCompile(`inet (\d+\.\d+\.\d+\.\d+)/`).FindAllStringSubmatch(out, -1) {
		m[f[1]] = true
	}
	return m
}

func nsList(t *testing.T) map[string]bool {
	t.Helper()
	m := map[string]bool{}
	for _, line := range strings.Split(run(t, 10*time.Second, "ip", "netns", "list"), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			m[f[0]] = true
		}
	}
	return m
}

// waitNodeState polls sinfo until NODE's state satisfies ok; returns it.
func waitNodeState(t *testing.T, node string, timeout time.Duration, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var state string
	for time.Now().Before(deadline) {
		out, _ := runErr(10*time.Second, "sinfo", "-h", "-N", "-n", node, "-o", "%T")
		if state = strings.TrimSpace(firstLine(out)); ok(state) {
			return state
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("%s: state %q after %v", node, state, timeout)
	return ""
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func dialFromHost(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err == nil {
		c.Close()
	}
	return err
}

// dialFromNode connects to addr from inside NODE's namespace (the test binary as helper).
func dialFromNode(t *testing.T, node, addr string) (string, error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("./slurm-cluster.sh", "exec", node, exe, "-test.run=^TestNetnsHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"=dial", "HELPER_ADDRS="+addr)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// startHelper runs a listener inside NODE's namespace on the comma-separated addrs; returns
// once it listens, and a function that stops it.
func startHelper(t *testing.T, node, mode, addrs string) func() {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("./slurm-cluster.sh", "exec", node, exe, "-test.run=^TestNetnsHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "HELPER_ADDRS="+addrs)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "listening") {
				ready <- sc.Text()
			}
		}
		close(ready)
	}()
	select {
	case line, ok := <-ready:
		if !ok {
			stop()
			t.Fatalf("helper in %s exited before listening", node)
		}
		t.Logf("helper in %s: %s", node, line)
	case <-time.After(20 * time.Second):
		stop()
		t.Fatalf("helper in %s did not listen within 20 s", node)
	}
	return stop
}

// TestNetnsHelperProcess is not a test: with SLURM_LLM_NETNS_HELPER set, the test binary runs
// as a helper inside a node's namespace ("listen": accept on every address of HELPER_ADDRS
// until killed; "dial": connect once to HELPER_ADDRS within 2 s and say how it went).
func TestNetnsHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		return
	}
	addrs := strings.Split(os.Getenv("HELPER_ADDRS"), ",")
	switch mode {
	case "listen":
		for _, a := range addrs {
			ln, err := net.Listen("tcp", a)
			if err != nil {
				fmt.Println("listen:", err)
				os.Exit(1)
			}
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
		}
		fmt.Println("listening on", strings.Join(addrs, " "))
		select {}
	case "dial":
		c, err := net.DialTimeout("tcp", addrs[0], 2*time.Second)
		if err != nil {
			fmt.Println("dial:", err)
			os.Exit(1)
		}
		fmt.Println("connected", c.LocalAddr(), "->", c.RemoteAddr())
		c.Close()
		os.Exit(0)
	}
	os.Exit(2)
}
