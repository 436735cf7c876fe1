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

func TestCheckFirewallOpen(t *testing.T) {
	loop := []Port{{Addr: "127.0.0.1", Port: 8080, Proto: "tcp", What: "nginx"}, {Addr: "127.0.0.1", Port: 8090, Proto: "tcp", What: "front door"}}
	exposed := []Port{{Addr: "", Port: 8080, Proto: "tcp", What: "nginx"}, {Addr: "0.0.0.0", Port: 9466, Proto: "udp", What: "hints"}}
	running := func(all string) Firewall { return Firewall{Firewalld: "running", Zone: "public", ZoneAll: all} }
	tests := []struct {
		name  string
		fw    Firewall
		ports []Port
		want  Status
		fix   []string
	}{
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
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { hasFix(t, CheckFirewallOpen(tt.fw, tt.ports), tt.want, tt.fix...) })
	}
}

func TestCheckRPCExposure(t *testing.T) {
	rpc := []Port{{Port: 50052, Proto: "tcp", What: "rpc-server"}}
	running := func(all string) Firewall { return Firewall{Firewalld: "running", Zone: "public", ZoneAll: all} }
	tests := []struct {
		name  string
		fw    Firewall
		ports []Port
		want  Status
		fix   []string
	}{
		{name: "single tier", fw: Firewall{}, want: OK},
		{name: "open to every source", fw: running(zonePublic("50052/tcp", "")), ports: rpc, want: Warn,
			fix: []string{"--remove-port=50052/tcp", "source address=NODES_CIDR port port=50052"}},
		{name: "only the nodes' network", ports: rpc, want: OK,
			fw: running(zonePublic("", `rule family="ipv4" source address="10.77.0.0/16" port port="50052" protocol="tcp" accept`))},
		{name: "a rich rule without a source is open to all", ports: rpc, want: Warn,
			fw: running(zonePublic("", `rule family="ipv4" port port="50052" protocol="tcp" accept`))},
		{name: "closed: the head cannot reach it", fw: running(zonePublic("", "")), ports: rpc, want: Warn, fix: []string{"--add-rich-rule"}},
		{name: "trusted zone", ports: rpc, want: Warn, fix: []string{"--set-target=default"},
			fw: Firewall{Firewalld: "running", Zone: "trusted", ZoneAll: "trusted (active)\n  target: ACCEPT\n"}},
		{name: "nftables: unknown", fw: Firewall{Nft: nftInput}, ports: rpc, want: Warn, fix: []string{"nft list ruleset | grep -w -e 50052"}},
		{name: "no firewall at all", fw: Firewall{NftMissing: true}, ports: rpc, want: Warn, fix: []string{"--add-rich-rule"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { hasFix(t, CheckRPCExposure(tt.fw, tt.ports), tt.want, tt.fix...) })
	}
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
			"firewall-cmd --list-all":         stdout("public (active)\n  ports: 8080/tcp\n")},
			want: Firewall{Firewalld: "running", Zone: "public", ZoneAll: "public (active)\n  ports: 8080/tcp\n"}},
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
