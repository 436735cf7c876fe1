package munge

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseVersion(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		want    string
		wantErr bool
	}{
		// 0.5.13: src/libcommon/version.c:40-44 at munge-0.5.13 prints META_ALIAS
		// (config/x_ac_meta.m4:71-73: NAME-VERSION, "-RELEASE" unless it is 1;
		// META: Version 0.5.13, Release 1, Date 2017-09-26), then " (META_DATE)".
		{name: "0.5.13", out: "munge-0.5.13 (2017-09-26)\n", want: "0.5.13"},
		{name: "0.5.13 built with a release other than 1", out: "munge-0.5.13-2 (2017-09-26)\n", want: "0.5.13-2"},
		{name: "0.5.13 built without a date", out: "munge-0.5.13\n", want: "0.5.13"},
		// 0.5.14, 0.5.15: version.c:40 at both tags, "%s-%s (%s)\n", PACKAGE, VERSION, DATE.
		{name: "0.5.14", out: "munge-0.5.14 (2020-01-14)\n", want: "0.5.14"},
		{name: "0.5.15 (Debian 12's unmunge --version)", out: "munge-0.5.15 (2022-06-22)\n", want: "0.5.15"},
		{name: "empty", out: "", wantErr: true},
		{name: "another program", out: "slurm 22.05.8\n", wantErr: true},
		{name: "no version number", out: "munge- (2017-09-26)\n", wantErr: true},
		{name: "two lines", out: "munge-0.5.15 (2022-06-22)\nmunge-0.5.13 (2017-09-26)\n", wantErr: true},
		{name: "a usage message", out: "unmunge: Error: Invalid option \"--version\"\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseVersion(tt.out)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("version = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	run := func(ctx context.Context, argv []string, stdin []byte) ([]byte, []byte, error) {
		if d := cmp.Diff([]string{"unmunge", "--version"}, argv); d != "" {
			t.Errorf("argv (-want +got):\n%s", d)
		}
		return []byte("munge-0.5.13 (2017-09-26)\n"), nil, nil
	}
	if got, err := Version(context.Background(), "", run); err != nil || got != "0.5.13" {
		t.Errorf("Version = %q, %v, want 0.5.13", got, err)
	}
	missing := func(ctx context.Context, argv []string, stdin []byte) ([]byte, []byte, error) {
		return nil, []byte("sh: unmunge: not found"), exitError(t, 127)
	}
	if _, err := Version(context.Background(), "", missing); err == nil || !strings.Contains(err.Error(), "munge version") {
		t.Errorf("Version with no unmunge: err = %v, want a munge version error", err)
	}
}
