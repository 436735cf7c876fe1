package doctor

import (
	"context"
	"strings"
)

// Slurm is what Slurm's client commands said.
type Slurm struct {
	Missing bool
	// Version is scontrol --version ("slurm 22.05.8"); VersionErr says
	// why the command failed (without a slurm.conf even --version fails:
	// "fatal: Could not establish a configuration source").
	Version, VersionErr string
	// PingErr is scontrol ping's failure ("" when slurmctld answered).
	PingErr string
	// Accounting is sacctmgr -n -P show cluster's output; AccountingErr
	// its failure (slurmdbd down, no accounting, no sacctmgr).
	Accounting, AccountingErr string
}

// GatherSlurm asks scontrol its version and slurmctld whether it is up,
// and, when accounting is asked, sacctmgr for the clusters (the runner's
// timeout bounds a slurmdbd that does not answer).
func GatherSlurm(ctx context.Context, h Host, accounting bool) Slurm {
	v := h.Run(ctx, Cmd{Name: "scontrol", Args: []string{"--version"}})
	if v.Missing {
		return Slurm{Missing: true}
	}
	if v.Err != nil {
		return Slurm{VersionErr: slurmError(v)}
	}
	s := Slurm{Version: firstLine(v.Stdout)}
	switch p := h.Run(ctx, Cmd{Name: "scontrol", Args: []string{"ping"}}); {
	case p.Err != nil && strings.TrimSpace(p.Stdout) != "":
		s.PingErr = firstLine(p.Stdout) // "Slurmctld(primary) at ctl is DOWN"
	case p.Err != nil:
		s.PingErr = slurmError(p)
	case !strings.Contains(p.Stdout, " is UP"):
		s.PingErr = "scontrol ping said: " + firstLine(p.Stdout)
	}
	if accounting {
		a := h.Run(ctx, Cmd{Name: "sacctmgr", Args: []string{"-n", "-P", "show", "cluster"}})
		s.Accounting = strings.TrimSpace(a.Stdout)
		if a.Err != nil || s.Accounting == "" {
			s.AccountingErr = firstLine(strings.TrimSpace(a.Stderr + " " + errText(a.Err)))
			if s.AccountingErr == "" {
				s.AccountingErr = "no cluster listed"
			}
		}
	}
	return s
}

// slurmError is the line of a Slurm command's output that says why it
// failed: its fatal line, else its first.
func slurmError(o Output) string {
	for _, l := range strings.Split(o.Stderr, "\n") {
		if strings.Contains(l, "fatal:") {
			return firstLine(l)
		}
	}
	if msg := firstLine(o.Text()); msg != "" {
		return msg
	}
	return errText(o.Err)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// CheckSlurmVersion checks that Slurm's commands are here and slurmctld
// answers.
func CheckSlurmVersion(s Slurm) Result {
	const c = "slurm.ctld"
	switch {
	case s.Missing:
		return fail(c, "Slurm's commands are not installed (scontrol)",
			"install Slurm's client commands (sbatch, squeue, scontrol, srun) and the cluster's slurm.conf")
	case s.VersionErr != "":
		return fail(c, "Slurm's commands do not run: "+s.VersionErr,
			"install the cluster's slurm.conf in /etc/slurm/ (or configless: the _slurmctld._tcp DNS SRV record), then scontrol ping")
	case s.PingErr != "":
		return fail(c, s.Version+": slurmctld does not answer: "+s.PingErr,
			"scontrol ping; systemctl status slurmctld on the controller; munge must work (munge.credential)")
	}
	return ok(c, s.Version+": slurmctld answers")
}

// CheckAccounting checks that Slurm's accounting answers: a key's
// account, or fair share by sshare, needs it (needed); otherwise its
// absence is only worth a warning.
func CheckAccounting(s Slurm, needed bool, why string) Result {
	const c = "slurm.accounting"
	switch {
	case (s.Missing || s.VersionErr != "") && needed:
		return fail(c, "accounting unknown: Slurm's commands do not run", "fix slurm.ctld first")
	case s.Missing || s.VersionErr != "":
		return warn(c, "accounting unknown: Slurm's commands do not run", "fix slurm.ctld first")
	case s.AccountingErr == "":
		return ok(c, "accounting answers (sacctmgr show cluster: "+firstLine(s.Accounting)+")")
	}
	what := "accounting does not answer: " + s.AccountingErr
	fix := "systemctl enable --now slurmdbd and AccountingStorageType=accounting_storage/slurmdbd in slurm.conf"
	if !needed {
		return warn(c, what+" (not needed by this config)", fix)
	}
	return fail(c, what+"; "+why+" needs it", fix+"; or in upstreams.toml [front.auth] slurm_accounts = false and [front.fair_share] weights = \"equal\"")
}
