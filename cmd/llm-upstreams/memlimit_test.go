package main

import (
	"math"
	"testing"
)

// TestFrontMemoryLimit: the soft limit is the bodies' bound plus the
// headroom, and no limit when the bound is none or would overflow.
func TestFrontMemoryLimit(t *testing.T) {
	for _, c := range []struct{ bodies, want int64 }{
		{256 << 20, 384 << 20},
		{4 << 30, 4<<30 + 128<<20},
		{0, math.MaxInt64},
		{math.MaxInt64 - 1, math.MaxInt64},
	} {
		if got := frontMemoryLimit(c.bodies); got != c.want {
			t.Errorf("frontMemoryLimit(%d) = %d, want %d", c.bodies, got, c.want)
		}
	}
}
