package doctor

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// unmungeOK is unmunge's answer to a good credential (0.5.13 to 0.5.15
// print the same lines; the uid line's form differs, not read here).
const unmungeOK = `STATUS:          Success (0)
ENCODE_HOST:     ctl (10.77.0.1)
UID:             root (0)
`

const mungeDown = `munge: Error: Failed to access "/run/munge/munge.socket.2": No such file or directory (Did you start munged?)`

func TestCheckMunge(t *testing.T) {
	tests := []struct {
		name              string
		facts             Munge
		version, roundTrp Status
		fix               []string
	}{
		{name: "not installed", facts: Munge{Missing: true}, version: Fail, roundTrp: Fail},
		{name: "RHEL 8's 0.5.13 round-trips", facts: Munge{Version: "munge-0.5.13 (2017-09-26)", Decode: unmungeOK}, version: OK, roundTrp: OK},
		{name: "munged down", facts: Munge{Version: "munge-0.5.15 (2022-09-29)", Encode: mungeDown, EncodeErr: "munge -n: exit status 6"},
			version: OK, roundTrp: Fail, fix: []string{"systemctl enable --now munge"}},
		{name: "credential refused", facts: Munge{Version: "munge-0.5.15 (2022-09-29)", Decode: "unmunge: Error: Invalid credential", DecodeErr: "unmunge: exit status 8"},
			version: OK, roundTrp: Fail, fix: []string{"/etc/munge/munge.key", "systemctl restart munge"}},
		{name: "older than the oldest checked", facts: Munge{Version: "munge-0.5.11 (2013-08-27)", Decode: unmungeOK}, version: Warn, roundTrp: OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hasFix(t, CheckMungeVersion(tt.facts), tt.version)
			hasFix(t, CheckMungeRoundTrip(tt.facts), tt.roundTrp, tt.fix...)
		})
	}
}

// The credential munge -n printed is what unmunge reads: no shell pipe.
func TestGatherMungePassesTheCredential(t *testing.T) {
	f := &fakeHost{cmds: map[string]Output{
		"munge --version": stdout("munge-0.5.15 (2022-09-29)\n"),
		"munge -n":        stdout("MUNGE:AwQFAAB...:\n"),
		"unmunge":         stdout(unmungeOK),
	}}
	got := GatherMunge(context.Background(), f.host())
	want := Munge{Version: "munge-0.5.15 (2022-09-29)", Encode: "MUNGE:AwQFAAB...:", Decode: unmungeOK[:len(unmungeOK)-1]}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if f.stdin["unmunge"] != "MUNGE:AwQFAAB...:\n" {
		t.Errorf("unmunge read %q", f.stdin["unmunge"])
	}
}

func TestCheckSlurm(t *testing.T) {
	up := Slurm{Version: "slurm 22.05.8", Accounting: "cluster|10.77.0.1|6817|..."}
	noDBD := Slurm{Version: "slurm 22.05.8", AccountingErr: "sacctmgr: error: Problem talking to the database: Connection refused"}
	tests := []struct {
		name        string
		facts       Slurm
		need        bool
		ctld, accts Status
		fix         []string
	}{
		{name: "not installed", facts: Slurm{Missing: true}, need: true, ctld: Fail, accts: Fail},
		{name: "no slurm.conf", facts: Slurm{VersionErr: "scontrol: fatal: Could not establish a configuration source"}, ctld: Fail, accts: Warn,
			fix: []string{"fix slurm.ctld first"}},
		{name: "all up", facts: up, need: true, ctld: OK, accts: OK},
		{name: "slurmctld down", facts: Slurm{Version: "slurm 20.11.9", PingErr: "Slurmctld(primary) at ctl is DOWN"}, ctld: Fail, accts: OK},
		{name: "no accounting, keys need accounts", facts: noDBD, need: true, ctld: OK, accts: Fail,
			fix: []string{"slurmdbd", "slurm_accounts = false"}},
		{name: "no accounting, not needed: a warning", facts: noDBD, ctld: OK, accts: Warn, fix: []string{"slurmdbd"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hasFix(t, CheckSlurmVersion(tt.facts), tt.ctld)
			hasFix(t, CheckAccounting(tt.facts, tt.need, "[front.auth] slurm_accounts"), tt.accts, tt.fix...)
		})
	}
}

// noConfig is scontrol --version's stderr without a slurm.conf (Slurm
// 22.05, Debian 12).
const noConfig = `scontrol: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host
scontrol: error: fetch_config: DNS SRV lookup failed
scontrol: error: _establish_config_source: failed to fetch config
scontrol: fatal: Could not establish a configuration source
`

func TestGatherSlurm(t *testing.T) {
	tests := []struct {
		name       string
		cmds       map[string]Output
		accounting bool
		want       Slurm
	}{
		{name: "no Slurm", want: Slurm{Missing: true}},
		{name: "up, accounting not asked", accounting: false, cmds: map[string]Output{
			"scontrol --version": stdout("slurm 22.05.8\n"),
			"scontrol ping":      stdout("Slurmctld(primary) at ctl is UP\n")},
			want: Slurm{Version: "slurm 22.05.8"}},
		{name: "ctld down, sacctmgr says nothing", accounting: true, cmds: map[string]Output{
			"scontrol --version":          stdout("slurm 22.05.8\n"),
			"scontrol ping":               Output{Stdout: "Slurmctld(primary) at ctl is DOWN\n", Err: errExit252},
			"sacctmgr -n -P show cluster": stdout("\n")},
			want: Slurm{Version: "slurm 22.05.8", PingErr: "Slurmctld(primary) at ctl is DOWN", AccountingErr: "no cluster listed"}},
		{name: "no slurm.conf: even --version fails (Slurm 22.05 on this test machine)", accounting: true, cmds: map[string]Output{
			"scontrol --version": {Stderr: noConfig, Err: errExit252}},
			want: Slurm{VersionErr: "scontrol: fatal: Could not establish a configuration source"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeHost{cmds: tt.cmds}
			if d := cmp.Diff(tt.want, GatherSlurm(context.Background(), f.host(), tt.accounting)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}
