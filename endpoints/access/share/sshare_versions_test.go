package share

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sshareVersions are the Slurm series whose `sshare -a -n -P -o
// Account,User,FairShare` output is written below, with the tag of
// SchedMD's repository it was read from.
var sshareVersions = []struct {
	name, tag string
	// classic is true where PriorityFlags=NO_FAIR_TREE still exists (to
	// 25.05): the classic algorithm prints a factor on account rows too.
	classic bool
}{
	{"20.11", "slurm-20-11-9-1", true},
	{"22.05", "slurm-22-05-8-1", true},
	{"23.11", "slurm-23-11-11-1", true},
	{"24.11", "slurm-24-11-7-1", true},
	{"25.05", "slurm-25-05-8-1", true},
	{"25.11", "slurm-25-11-7-1", false},
}

// The output is the same in all six (src/sshare/process.c, process(); the
// fields table has "Account", "User" and "FairShare" in every tag, matched
// by a case-insensitive prefix, so "Fairshare" and "fairshare" name the
// same column):
//   - -n prints no header, -P separates with '|' and ends a line without
//     one (print_fields.c, PRINT_FIELDS_PARSABLE_NO_ENDING);
//   - Account is the association's account indented one space a level
//     (slurmdb_tree_name_get): "root", " chem", and a user's row shows its
//     account "  chem";
//   - User is empty on an account's row (root's and every parent's);
//   - FairShare is print_fields_double, "%f" (six decimals). Under fair
//     tree (the default since 19.05, and the only algorithm in 25.11) an
//     account's row has none (NO_VAL64 prints as nothing); under
//     PriorityFlags=NO_FAIR_TREE (to 25.05) it has the classic factor.
func sshareOutput(classic bool) string {
	acct := func(s string) string {
		if classic {
			return s
		}
		return ""
	}
	return "root||" + acct("1.000000") + "\n" +
		" root|root|1.000000\n" +
		" chem||" + acct("0.612345") + "\n" +
		"  chem|alice|0.750000\n" +
		"  chem|bob|0.000000\n" +
		" phys||" + acct("0.401000") + "\n" +
		"  phys|alice|0.250000\n"
}

func TestParseSshareAcrossVersions(t *testing.T) {
	want := map[Assoc]float64{{"root", "root"}: 1, {"chem", "alice"}: 0.75, {"chem", "bob"}: 0, {"phys", "alice"}: 0.25}
	for _, v := range sshareVersions {
		modes := []bool{false}
		if v.classic {
			modes = append(modes, true)
		}
		for _, classic := range modes {
			name := v.name + "/fair tree"
			if classic {
				name = v.name + "/classic (NO_FAIR_TREE)"
			}
			t.Run(name, func(t *testing.T) {
				got, err := ParseSshare([]byte(sshareOutput(classic)))
				if err != nil {
					t.Fatalf("%s (%s): %v", v.name, v.tag, err)
				}
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("%s (%s) (-want +got):\n%s", v.name, v.tag, d)
				}
			})
		}
	}
}
