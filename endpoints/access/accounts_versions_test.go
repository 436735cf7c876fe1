package access

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// `sacctmgr -n -P show user NAME withassoc
// format=User,DefaultAccount,Account` prints the same in Slurm 20.11,
// 22.05, 23.11, 24.11, 25.05 and 25.11 (sacctmgr_list_user in
// src/sacctmgr/user_functions.c; the format names are matched by
// case-insensitive prefix in src/sacctmgr/common.c, and -n, -P in
// sacctmgr.c, the same in every tag): one line per association, the user's
// default account on that association's cluster in the middle, '|'
// between fields and none at the end (print_fields_str,
// PRINT_FIELDS_PARSABLE_NO_ENDING). A partition's association repeats its
// account. A user record without associations prints one line with the
// account empty (the else branch: the account column prints NULL as "").
// The lines are written from that source; each version runs.
var sacctmgrVersions = []struct{ name, tag string }{
	{"20.11", "slurm-20-11-9-1"},
	{"22.05", "slurm-22-05-8-1"},
	{"23.11", "slurm-23-11-11-1"},
	{"24.11", "slurm-24-11-7-1"},
	{"25.05", "slurm-25-05-8-1"},
	{"25.11", "slurm-25-11-7-1"},
}

func TestParseSacctmgrAcrossVersions(t *testing.T) {
	cases := []struct {
		name, out string
		want      UserAccounts
	}{
		{name: "two accounts", out: "alice|chem|chem\nalice|chem|phys\n",
			want: UserAccounts{Default: "chem", All: []string{"chem", "phys"}}},
		{name: "a partition's association repeats the account", out: "alice|chem|chem\nalice|chem|chem\nalice|chem|phys\n",
			want: UserAccounts{Default: "chem", All: []string{"chem", "phys"}}},
		{name: "a user without associations", out: "alice|chem|\n",
			want: UserAccounts{Default: "chem"}},
	}
	for _, v := range sacctmgrVersions {
		for _, tc := range cases {
			t.Run(v.name+"/"+tc.name, func(t *testing.T) {
				got, err := ParseSacctmgr([]byte(tc.out), "alice")
				if err != nil {
					t.Fatalf("%s (%s): %v", v.name, v.tag, err)
				}
				if d := cmp.Diff(tc.want, got); d != "" {
					t.Errorf("%s (%s) (-want +got):\n%s", v.name, v.tag, d)
				}
			})
		}
	}
}
