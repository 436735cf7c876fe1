package munge

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"slurm-llm/endpoints/access/internal/execx"
)

// versionLine is what `--version` prints for every munge program:
// "munge-0.5.13 (2017-09-26)" (0.5.13's src/libcommon/version.c: META_ALIAS,
// "-RELEASE" appended when it is not 1, then " (META_DATE)" when defined),
// "munge-0.5.15 (2022-06-22)" (0.5.14 and 0.5.15: "%s-%s (%s)\n", PACKAGE,
// VERSION, DATE).
var versionLine = regexp.MustCompile(`^munge-([0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.]+)?)(?: \([^()]*\))?$`)

// Version runs `unmunge --version` (bin, "" for "unmunge" from PATH) and
// returns munge's version ("0.5.13"), so that a check of the install can
// say which munge it found; Verify works with 0.5.13 and later.
func Version(ctx context.Context, bin string, run execx.Runner) (string, error) {
	if bin == "" {
		bin = "unmunge"
	}
	out, err := execx.Run(ctx, run, 5*time.Second, []string{bin, "--version"}, nil)
	if err != nil {
		return "", fmt.Errorf("munge version: %w", err)
	}
	return parseVersion(string(out))
}

// parseVersion reads the version out of a --version line.
func parseVersion(out string) (string, error) {
	line := strings.TrimSpace(out)
	m := versionLine.FindStringSubmatch(line)
	if m == nil {
		return "", fmt.Errorf("munge version: %q: want \"munge-X.Y.Z (DATE)\"", cut(line, 64))
	}
	return m[1], nil
}
