package stream

import (
	"strings"
	"testing"

	"slurm-llm/endpoints/front/wire"
)

// TestInfillIsNotContinued: an /infill stream's prompt is built by the
// head from input_prefix and input_suffix, so a cut one is not resent
// with its text as a prefill.
func TestInfillIsNotContinued(t *testing.T) {
	if why := Refused(KindOf("/infill"), wire.Keys{}); !strings.Contains(why, "/infill") {
		t.Errorf("Refused(/infill) = %q, want a reason naming /infill", why)
	}
	if why := Refused(KindOf("/completions"), wire.Keys{}); why != "" {
		t.Errorf("Refused(/completions) = %q, want none: it is /completion", why)
	}
}
