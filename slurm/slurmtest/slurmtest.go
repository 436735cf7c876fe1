// Package slurmtest is what end-to-end tests that run against the local
// test cluster (scripts/slurm-cluster.sh) share: its mode (loopback, or
// netns with real per-node addresses) and each node's addresses, read from
// the state file the script writes, and the fault commands of netns mode.
// It is for tests only; it decides nothing about a product.
package slurmtest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// StateFile is where scripts/slurm-cluster.sh up writes the cluster's mode
// and addresses (key=value lines).
const StateFile = "/run/slurm-llm-cluster/cluster.env"

// Script is the cluster script, relative to the module root.
const Script = "scripts/slurm-cluster.sh"

// Cluster is the local test cluster as the script brought it up.
type Cluster struct {
	// Mode is "loopback" (every node on 127.0.0.1) or "netns" (each node in
	// its own network namespace, with an Ethernet and an IPoIB address).
	Mode  string
	Nodes []string
	// ControllerAddr is the controller's address on the nodes' network.
	ControllerAddr string
	kv             map[string]string
}

// Load reads the state file; ok is false when no cluster is up.
func Load() (Cluster, bool, error) {
	f, err := os.Open(StateFile)
	if os.IsNotExist(err) {
		return Cluster{}, false, nil
	}
	if err != nil {
		return Cluster{}, false, fmt.Errorf("read cluster state: %w", err)
	}
	defer f.Close()
	kv := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			kv[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return Cluster{}, false, fmt.Errorf("read cluster state: %w", err)
	}
	c := Cluster{Mode: kv["mode"], ControllerAddr: kv["controller_addr"], kv: kv}
	if kv["nodes"] != "" {
		c.Nodes = strings.Split(kv["nodes"], ",")
	}
	return c, c.Mode != "", nil
}

// Need returns the cluster, or skips the test when it is not up (or not
// root); with mode set, it skips unless the cluster runs in that mode.
func Need(t testing.TB, mode string) Cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("e2e: needs root and the local cluster (scripts/slurm-cluster.sh up)")
	}
	c, ok, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Skip("e2e: no local cluster: run scripts/slurm-cluster.sh up [--netns]")
	}
	if mode != "" && c.Mode != mode {
		t.Skipf("e2e: needs the cluster in %s mode (scripts/slurm-cluster.sh up --%s), it runs in %s mode", mode, mode, c.Mode)
	}
	return c
}

// Root is the root the cluster's Slurm runs from (make e2e-slurm24's
// chroot), "" for the host's.
func (c Cluster) Root() string { return c.kv["slurm_root"] }

// SlurmConf is the slurm.conf the cluster's daemons read: the host's
// /etc/slurm/slurm.conf, or the one in the root file system the script ran
// them from (slurm_root= in the state file: make e2e-slurm24's Slurm 24.11).
func (c Cluster) SlurmConf() string { return c.kv["slurm_root"] + "/etc/slurm/slurm.conf" }

// SlurmConfPath is the SlurmConf of the cluster that is up, else the host's
// /etc/slurm/slurm.conf: for tests that copy the cluster's config.
func SlurmConfPath() string {
	c, ok, err := Load()
	if err != nil || !ok {
		return "/etc/slurm/slurm.conf"
	}
	return c.SlurmConf()
}

// Addr is node's address on the cluster network (NodeAddr: where the
// controller and nginx reach it).
func (c Cluster) Addr(node string) string { return c.kv[node+"_addr"] }

// IBAddr is node's IPoIB address (netns mode; "" in loopback mode).
func (c Cluster) IBAddr(node string) string { return c.kv[node+"_ib"] }

// Namespace is node's network namespace (netns mode).
func (c Cluster) Namespace(node string) string { return c.kv[node+"_ns"] }

// Accounting is the cluster's Slurm accounting as the script made it: a
// real slurmdbd, two accounts and two users (system users, made with
// useradd) with associations made with sacctmgr.
type Accounting struct {
	// Accounts are the two accounts, A and B.
	Accounts [2]string
	// Both has an association in both accounts, default A; One has one in
	// B only.
	Both, One string
}

// NeedAccounting returns the cluster's accounting, and fails the test
// when the cluster runs without slurmdbd (brought up by an older script:
// bring it down and up again), so that a test of accounting never passes
// without it.
func (c Cluster) NeedAccounting(t testing.TB) Accounting {
	t.Helper()
	accts := strings.Split(c.kv["accounts"], ",")
	a := Accounting{Both: c.kv["acct_user_both"], One: c.kv["acct_user_one"]}
	if c.kv["accounting"] != "slurmdbd" || len(accts) != 2 || a.Both == "" || a.One == "" {
		t.Fatalf("e2e: the cluster has no slurmdbd (%s: accounting=%q accounts=%q): run %s down, then up",
			StateFile, c.kv["accounting"], c.kv["accounts"], Script)
	}
	a.Accounts = [2]string{accts[0], accts[1]}
	return a
}

// Fault runs a fault subcommand of the cluster script (netns mode):
// node-lose, node-return, link-cut, link-restore. root is the module root.
func (c Cluster) Fault(t testing.TB, root string, args ...string) {
	t.Helper()
	cmd := exec.Command(root+"/"+Script, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", Script, strings.Join(args, " "), err, out)
	}
}
