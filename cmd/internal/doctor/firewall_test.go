package doctor

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// zonePublic is firewall-cmd --list-all of RHEL 8's default zone, with
// what a test adds.
func zonePublic(ports, rich string) string {
	return `public (active)
  target: default
  icmp-block-inversion: no
  interfaces: eth0
  sources: 
  services: cockpit dhcpv6-client ssh
  ports: ` + ports + `
  protocols: 
  masquerade: no
  forward-ports: 
  source-ports: 
  icmp-blocks: 
  rich rules: 
	` + rich + "\n"
}

const nftInput = `table inet filter {
	chain input {
		type filter hook input priority filter; policy drop;
		ct state established,related accept
	}
}
`

// nftREADME is nft list ruleset with README's rules (A hostile cluster
// user), as nft 1.0.6 printed them in a network namespace (TestRealHost
// adds them for real): the user as its uid.
const nftREADME = `table inet slurm_llm_rpc {
	chain output {
		type filter hook output priority filter; policy accept;
		ip daddr 10.77.0.0/16 tcp dport 50052 meta skuid != 990 counter packets 0 bytes 0 reject with tcp reset
	}

	chain input {
		type filter hook input priority filter; policy accept;
		tcp dport 50052 ip saddr != 10.77.0.0/16 counter packets 0 bytes 0 drop
	}
}
`

func withNft(f Firewall, ruleset string) Firewall {
	f.Nft = ruleset
	return f
}

func TestNftPortMatch(t *testing.T) {
	tests := []struct {
		rule string
		port int
		want bool
	}{
		{"tcp dport 50052 ip saddr != 10.77.0.0/16 drop", 50052, true},
		{"tcp dport 50052 ip saddr != 10.77.0.0/16 drop", 50053, false},
		{"tcp dport { 50052, 50060-50070 } ip saddr != 10.77.0.0/16 drop", 50065, true},
		{"tcp dport { 50052, 50060-50070 } ip saddr != 10.77.0.0/16 drop", 50059, false},
		{"tcp dport 50000-50100 drop", 50052, true},
		{"udp dport 50052 drop", 50052, false},
		{"ct state established accept", 50052, false},
	}
	for _, tt := range tests {
		if got := nftPortMatch(tt.rule, tt.port); got != tt.want {
			t.Errorf("nftPortMatch(%q, %d) = %v", tt.rule, tt.port, got)
		}
	}
}

func TestNftREADMERules(t *testing.T) {
	chains := parseNft(nftREADME)
	if got := nftInputSource(chains, 50052); got != "10.77.0.0/16" {
		t.Errorf("input source = %q", got)
	}
	if got := nftOutputUser(chains, 50052); got != "uid 990" {
		t.Errorf("output user = %q", got)
	}
}

// firewallCase is one firewall's facts, the ports checked, and the
// status and fixes wanted.
type firewallCase struct {
	name  string
	fw    Firewall
	ports []Port
	want  Status
	fix   []string
}

func runFirewallCases(t *testing.T, check func(Firewall, []Port) Result, tests []firewallCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { hasFix(t, check(tt.fw, tt.ports), tt.want, tt.fix...) })
	}
}

// running is firewalld running with public as its default zone.
func running(all string) Firewall {
	return Firewall{Firewalld: "running", Zone: "public", ZoneAll: all}
}

func TestCheckFirewallOpen(t *testing.T) {
	loop := []Port{{Addr: "127.0.0.1", Port: 8080, Proto: "tcp", What: "nginx"}, {Addr: "127.0.0.1", Port: 8090, Proto: "tcp", What: "front door"}}
	exposed := []Port{{Addr: "", Port: 8080, Proto: "tcp", What: "nginx"}, {Addr: "0.0.0.0", Port: 9466, Proto: "udp", What: "hints"}}
	tests := []firewallCase{
		{name: "loopback only: no rule needed", fw: running(zonePublic("", "")), ports: loop, want: OK},
		{name: "firewalld closes them", fw: running(zonePublic("", "")), ports: exposed, want: Fail,
			fix: []string{"firewall-cmd --permanent --add-port=8080/tcp", "firewall-cmd --permanent --add-port=9466/udp", "firewall-cmd --reload"}},
		{name: "firewalld opens them (one by a range)", fw: running(zonePublic("8080/tcp 9400-9500/udp", "")), ports: exposed, want: OK},
		{name: "firewalld: a range of the other protocol does not count", fw: running(zonePublic("9400-9500/tcp 8080/tcp", "")), ports: exposed, want: Fail,
			fix: []string{"--add-port=9466/udp"}},
		{name: "nftables filters input: unknown, not a pass", fw: Firewall{Firewalld: "not running", Nft: nftInput}, ports: exposed, want: Warn,
			fix: []string{"nft list ruleset | grep -w -e 8080 -e 9466"}},
		{name: "nftables without an input chain", fw: Firewall{Nft: "table ip nat {\n}\n"}, ports: exposed, want: OK},
		{name: "nft not readable", fw: Firewall{NftErr: "Operation not permitted"}, ports: exposed, want: Warn, fix: []string{"nft list ruleset"}},
	}
	runFirewallCases(t, CheckFirewallOpen, tests)
}

func TestCheckRPCExposure(t *testing.T) {
	rpc := []Port{{Port: 50052, Proto: "tcp", What: "rpc-server"}}
	tests := []firewallCase{
		{name: "single tier", fw: Firewall{}, want: OK},
		{name: "open to every source", fw: running(zonePublic("50052/tcp", "")), ports: rpc, want: Warn,
			fix: []string{"--remove-port=50052/tcp", "source address=NODES_CIDR port port=50052"}},
		{name: "only the nodes' network, and only the tier account on them", ports: rpc, want: OK,
			fw: withNft(running(zonePublic("", `rule family="ipv4" source address="10.77.0.0/16" port port="50052" protocol="tcp" accept`)), nftREADME)},
		{name: "only the nodes' network, but every user on them", ports: rpc, want: Warn, fix: []string{`meta skuid != "slurm-llm" reject`},
			fw: running(zonePublic("", `rule family="ipv4" source address="10.77.0.0/16" port port="50052" protocol="tcp" accept`))},
		{name: "README's nftables rules", fw: Firewall{Nft: nftREADME}, ports: rpc, want: OK},
		{name: "README's nftables rules: a port they do not cover", fw: Firewall{Nft: nftREADME}, ports: []Port{{Port: 50053, Proto: "tcp"}}, want: Warn,
			fix: []string{"tcp dport 50053 ip saddr != NODES_CIDR drop"}},
		{name: "policy drop, the nodes accepted", ports: rpc, want: Warn, fix: []string{"skuid"},
			fw: Firewall{Nft: "table inet f {\n\tchain input {\n\t\ttype filter hook input priority filter; policy drop;\n\t\tip saddr 10.77.0.0/16 tcp dport 50052 accept\n\t}\n}\n"}},
		{name: "a rich rule without a source is open to all", ports: rpc, want: Warn,
			fw: running(zonePublic("", `rule family="ipv4" port port="50052" protocol="tcp" accept`))},
		{name: "closed: the head cannot reach it", fw: running(zonePublic("", "")), ports: rpc, want: Warn, fix: []string{"--add-rich-rule"}},
		{name: "trusted zone", ports: rpc, want: Warn, fix: []string{"--set-target=default"},
			fw: Firewall{Firewalld: "running", Zone: "trusted", ZoneAll: "trusted (active)\n  target: ACCEPT\n"}},
		{name: "nftables without a rule for the port: unknown", fw: Firewall{Nft: nftInput}, ports: rpc, want: Warn, fix: []string{"tcp dport 50052 ip saddr != NODES_CIDR drop"}},
		{name: "no firewall at all", fw: Firewall{NftMissing: true}, ports: rpc, want: Warn, fix: []string{"--add-rich-rule"}},
	}
	runFirewallCases(t, CheckRPCExposure, tests)
}

func TestGatherFirewall(t *testing.T) {
	tests := []struct {
		name string
		cmds map[string]Output
		want Firewall
	}{
		{name: "firewalld running", cmds: map[string]Output{
			"firewall-cmd --state":            stdout("running\n"),
			"firewall-cmd --get-default-zone": stdout("public\n"),
			"firewall-cmd --list-all":         stdout("public (active)\n  ports: 8080/tcp\n"),
			"nft list ruleset":                stdout(nftREADME)},
			want: Firewall{Firewalld: "running", Zone: "public", ZoneAll: "public (active)\n  ports: 8080/tcp\n", Nft: nftREADME}},
		{name: "firewalld stopped: nft asked", cmds: map[string]Output{
			"firewall-cmd --state": {Stderr: "not running\n", Err: errExit252},
			"nft list ruleset":     stdout(nftInput)},
			want: Firewall{Firewalld: "not running", Nft: nftInput}},
		{name: "neither", want: Firewall{NftMissing: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeHost{cmds: tt.cmds}
			if d := cmp.Diff(tt.want, GatherFirewall(context.Background(), f.host())); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}
