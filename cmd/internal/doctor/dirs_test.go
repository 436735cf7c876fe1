package doctor

import (
	"errors"
	"io/fs"
	"testing"
)

func TestCheckDir(t *testing.T) {
	ep := Dir{Path: "/cluster/shared/ai/endpoints", Role: "endpoint_dir", Owners: []string{"slurm-llm"}, Owner: "slurm-llm"}
	state := Dir{Path: "/var/lib/slurm-llm/upstreams", Role: "state_dir", MadeByUnit: true}
	tests := []struct {
		name string
		dir  Dir
		e    Entry
		want Status
		fix  []string
	}{
		{name: "fine", dir: ep, e: Entry{IsDir: true, Mode: 0o755, Owner: "slurm-llm"}, want: OK},
		{name: "0777", dir: ep, e: Entry{IsDir: true, Mode: 0o777, Owner: "slurm-llm"}, want: Fail,
			fix: []string{"chmod 0755 /cluster/shared/ai/endpoints", "chown slurm-llm /cluster/shared/ai/endpoints"}},
		{name: "1777, sticky like /tmp, is still writable by others", dir: ep, e: Entry{IsDir: true, Mode: 0o777 | fs.ModeSticky, Owner: "slurm-llm"},
			want: Fail, fix: []string{"chmod 0755"}},
		{name: "0775 is the site's choice", dir: ep, e: Entry{IsDir: true, Mode: 0o775, Owner: "slurm-llm"}, want: OK},
		{name: "missing", dir: ep, e: Entry{NotExist: true, Err: fs.ErrNotExist}, want: Fail,
			fix: []string{"install -d -o slurm-llm -g slurm-llm -m 0755 /cluster/shared/ai/endpoints"}},
		{name: "missing, made by its unit", dir: state, e: Entry{NotExist: true, Err: fs.ErrNotExist}, want: OK},
		{name: "a symlink", dir: ep, e: Entry{IsSymlink: true, Mode: 0o777}, want: Fail, fix: []string{"rm /cluster/shared/ai/endpoints && install -d"}},
		{name: "a file", dir: ep, e: Entry{Mode: 0o644}, want: Fail, fix: []string{"install -d"}},
		{name: "another owner", dir: ep, e: Entry{IsDir: true, Mode: 0o755, Owner: "mallory", UID: 1001}, want: Warn,
			fix: []string{"chown slurm-llm /cluster/shared/ai/endpoints"}},
		{name: "cannot see it", dir: ep, e: Entry{Err: errors.New("permission denied")}, want: Warn, fix: []string{"ls -ld"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { hasFix(t, CheckDir(tt.dir, tt.e), tt.want, tt.fix...) })
	}
}
