package access

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints/access/share"
)

func TestParseSacctmgr(t *testing.T) {
	tests := []struct {
		name, out string
		want      UserAccounts
		wantErr   error
	}{
		{name: "one account", out: "bob|phys|phys\n", want: UserAccounts{Default: "phys", All: []string{"phys"}}},
		{name: "several", out: "alice|chem|phys\nalice|chem|chem\nalice|chem|chem\n", want: UserAccounts{Default: "chem", All: []string{"chem", "phys"}}},
		{name: "no association", out: "", wantErr: ErrNoAccount},
		{name: "another user's line", out: "mallory|x|x\n", wantErr: errors.New("")},
		{name: "not three fields", out: "alice|chem\n", wantErr: errors.New("")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			user := "alice"
			if tt.name == "one account" {
				user = "bob"
			}
			got, err := ParseSacctmgr([]byte(tt.out), user)
			if (err != nil) != (tt.wantErr != nil) || (errors.Is(tt.wantErr, ErrNoAccount) && !errors.Is(err, ErrNoAccount)) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestChooseAccount(t *testing.T) {
	ua := UserAccounts{Default: "chem", All: []string{"chem", "phys"}}
	for _, tt := range []struct {
		ua       UserAccounts
		override string
		want     string
		ok       bool
	}{
		{ua, "", "chem", true},
		{ua, "phys", "phys", true},
		{ua, "bio", "", false},
		{UserAccounts{All: []string{"b", "a"}}, "", "b", true},
	} {
		got, err := tt.ua.Choose(tt.override)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("Choose(%q) = %q, %v", tt.override, got, err)
		}
	}
}

func TestAccountsCache(t *testing.T) {
	now := t0
	runs := 0
	a := NewAccounts(AccountsOptions{TTL: time.Minute, Now: func() time.Time { return now }, Cluster: "c1",
		Run: func(ctx context.Context, argv []string, stdin []byte) ([]byte, []byte, error) {
			runs++
			want := []string{"sacctmgr", "-n", "-P", "show", "user", "alice", "withassoc", "cluster=c1", "format=User,DefaultAccount,Account"}
			if d := cmp.Diff(want, argv); d != "" {
				t.Errorf("argv (-want +got):\n%s", d)
			}
			return []byte("alice|chem|chem\n"), nil, nil
		}})
	if got := a.Cached("alice"); got != "" {
		t.Errorf("Cached before any lookup: %q", got)
	}
	for i := 0; i < 3; i++ {
		if ua, err := a.Lookup(context.Background(), "alice"); err != nil || ua.Default != "chem" {
			t.Fatalf("Lookup = %+v, %v", ua, err)
		}
	}
	if runs != 1 {
		t.Errorf("sacctmgr ran %d times in the TTL, want 1", runs)
	}
	now = now.Add(time.Minute)
	if got := a.Cached("alice"); got != "chem" {
		t.Errorf("Cached when stale: %q, want the last answer", got)
	}
	a.Lookup(context.Background(), "alice")
	if runs != 2 {
		t.Errorf("sacctmgr ran %d times, want 2 after the TTL", runs)
	}
	if _, err := a.Lookup(context.Background(), "format=x"); err == nil || runs != 2 {
		t.Errorf("a name sacctmgr would take for an option: %v (runs %d)", err, runs)
	}
}

func TestWriteErrors(t *testing.T) {
	w := httptest.NewRecorder()
	WriteUnauthorized(w, "no key")
	if w.Code != 401 || !strings.Contains(w.Header().Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("401: %d %v", w.Code, w.Header())
	}
	want := `{"error":{"code":"invalid_api_key","message":"no key","param":null,"type":"invalid_request_error"}}` + "\n"
	if w.Body.String() != want {
		t.Errorf("body %q, want %q", w.Body, want)
	}
	w = httptest.NewRecorder()
	WriteRateLimited(w, share.Decision{Limit: share.LimitTokens, RetryAfter: 1500 * time.Millisecond, Why: "tokens per minute used up"})
	if w.Code != 429 || w.Header().Get("Retry-After") != "2" || !strings.Contains(w.Body.String(), `"code":"rate_limit_exceeded"`) ||
		!strings.Contains(w.Body.String(), `"type":"tokens"`) {
		t.Errorf("429: %d %v %s", w.Code, w.Header(), w.Body)
	}
}

// TestAccountsRunSacctmgrInSlurmEnvironment pins that NewAccounts without
// a runner runs sacctmgr as every parsed Slurm command runs
// (slurm.CommandEnv): before, it inherited the front door's
// SLURM_TIME_FORMAT and SQUEUE_* as they were. The fake answers only in
// the forced environment.
func TestAccountsRunSacctmgrInSlurmEnvironment(t *testing.T) {
	sacctmgr := filepath.Join(t.TempDir(), "sacctmgr")
	script := "#!/bin/sh\n" +
		`[ "$SLURM_TIME_FORMAT" = standard ] || { echo "SLURM_TIME_FORMAT=$SLURM_TIME_FORMAT" >&2; exit 1; }` + "\n" +
		"echo 'alice|chem|chem'\n"
	if err := os.WriteFile(sacctmgr, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLURM_TIME_FORMAT", "relative")
	ua, err := NewAccounts(AccountsOptions{Sacctmgr: sacctmgr, Cluster: "c1"}).Lookup(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(UserAccounts{Default: "chem", All: []string{"chem"}}, ua); d != "" {
		t.Errorf("Lookup (-want +got):\n%s", d)
	}
}

// sharedDatabase answers as Slurm does when one slurmdbd serves clusters
// c1 and c2: `scontrol show config` names c1 (22.05's lines), and
// sacctmgr without cluster= lists alice's associations on both, c2's last,
// each line with its cluster's default account (sacctmgr_list_user).
type sharedDatabase struct{ scontrolRuns, sacctmgrRuns int }

func (d *sharedDatabase) run(ctx context.Context, argv []string, stdin []byte) ([]byte, []byte, error) {
	switch argv[0] {
	case "scontrol":
		d.scontrolRuns++
		return []byte("Configuration data as of 2026-11-27T10:00:00\n" +
			"AccountingStorageType   = accounting_storage/slurmdbd\n" +
			"AuthInfo                = (null)\n" +
			"ClusterName             = c1\n" +
			"SLURM_VERSION           = 22.05.8\n"), nil, nil
	case "sacctmgr":
		d.sacctmgrRuns++
		c1 := "alice|chem|chem\nalice|chem|chem\n"
		c2 := "alice|phys|bio\nalice|phys|phys\n"
		switch argv[7] {
		case "cluster=c1":
			return []byte(c1), nil, nil
		case "cluster=c2":
			return []byte(c2), nil, nil
		}
		return []byte(c1 + c2), nil, nil
	}
	return nil, []byte("no such command"), errors.New("exit status 1")
}

// TestAccountsAskThisCluster pins the failure on a slurmdbd shared by
// several clusters: without cluster= sacctmgr listed alice's associations
// on every cluster, and the last line's default (c2's phys) and c2's
// accounts were taken for this cluster's.
func TestAccountsAskThisCluster(t *testing.T) {
	tests := []struct {
		name    string
		cluster string
		want    UserAccounts
		// scontrol is how often scontrol show config ran for two lookups.
		scontrol int
	}{
		{name: "this cluster, named by scontrol once", want: UserAccounts{Default: "chem", All: []string{"chem"}}, scontrol: 1},
		{name: "a cluster set in the options", cluster: "c2", want: UserAccounts{Default: "phys", All: []string{"bio", "phys"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := &sharedDatabase{}
			a := NewAccounts(AccountsOptions{Cluster: tt.cluster, TTL: time.Nanosecond, Run: db.run})
			for i := 0; i < 2; i++ {
				ua, err := a.Lookup(context.Background(), "alice")
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(tt.want, ua); d != "" {
					t.Errorf("lookup %d (-want +got):\n%s", i+1, d)
				}
			}
			if db.scontrolRuns != tt.scontrol || db.sacctmgrRuns != 2 {
				t.Errorf("scontrol ran %d times, sacctmgr %d; want %d and 2", db.scontrolRuns, db.sacctmgrRuns, tt.scontrol)
			}
		})
	}
}

// TestAccountsClusterUnknown: when scontrol cannot name the cluster the
// lookup fails (the key endpoint answers 503) and the next one asks again.
func TestAccountsClusterUnknown(t *testing.T) {
	db := &sharedDatabase{}
	down := true
	a := NewAccounts(AccountsOptions{Run: func(ctx context.Context, argv []string, stdin []byte) ([]byte, []byte, error) {
		if argv[0] == "scontrol" && down {
			db.scontrolRuns++
			return nil, []byte("slurm_load_ctl_conf error: Unable to contact slurm controller"), errors.New("exit status 1")
		}
		return db.run(ctx, argv, stdin)
	}})
	if _, err := a.Lookup(context.Background(), "alice"); err == nil || db.sacctmgrRuns != 0 {
		t.Fatalf("Lookup with scontrol failing: %v, sacctmgr ran %d times; want an error and none", err, db.sacctmgrRuns)
	}
	down = false
	ua, err := a.Lookup(context.Background(), "alice")
	if err != nil || ua.Default != "chem" || db.scontrolRuns != 2 {
		t.Errorf("Lookup once scontrol answers: %+v, %v (scontrol ran %d times, want 2)", ua, err, db.scontrolRuns)
	}
}
