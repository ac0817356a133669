package cli

import (
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"1024", 1024, true},
		{"1GiB", 1 << 30, true},
		{"1Gi", 1 << 30, true},
		{"1gib", 1 << 30, true},
		{"500M", 500e6, true},
		{"500MB", 500e6, true},
		{"1.5G", 1.5e9, true},
		{"2 TiB", 2 << 40, true},
		{"10B", 10, true},
		{"", 0, false},
		{"G", 0, false},
		{"1XB", 0, false},
		{"-1G", 0, false},
		{"1e3", 0, false},
		{"99999999999TiB", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseSize(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("parseSize(%q) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
			}
		})
	}
}

// TestReleaseLine: the progress line shows each claim's step and counts
// a new error at the same step as a new attempt.
func TestReleaseLine(t *testing.T) {
	seen := claimAttempts{}
	claim := func(st csi.ClaimState, lastErr string) []api.AllocationClaim {
		return []api.AllocationClaim{{Namespace: "default", VolumeID: "data", Claim: &csi.Claim{State: st, LastError: lastErr}}}
	}
	steps := []struct {
		claims []api.AllocationClaim
		want   string
	}{
		{claim(csi.ClaimUnpublishing, ""), "releasing web-1: default/data unpublishing (attempt 1)"},
		{claim(csi.ClaimUnpublishing, "node node-2 is down"), "releasing web-1: default/data unpublishing (attempt 2: node node-2 is down)"},
		{claim(csi.ClaimUnpublishing, "node node-2 is down"), "releasing web-1: default/data unpublishing (attempt 2: node node-2 is down)"},
		{claim(csi.ClaimUnpublishing, "plugin timed out"), "releasing web-1: default/data unpublishing (attempt 3: plugin timed out)"},
		{claim(csi.ClaimNodeDetached, ""), "releasing web-1: default/data node-detached (attempt 1)"},
	}
	for i, s := range steps {
		if got := releaseLine("web-1", s.claims, seen); got != s.want {
			t.Errorf("step %d: %q, want %q", i, got, s.want)
		}
	}
}

// TestProgress_NotTerminal: with no terminal, or with -json, nothing is
// shown.
func TestProgress_NotTerminal(t *testing.T) {
	var buf strings.Builder
	p := &progress{}
	p.show("releasing")
	p.done()
	on := &progress{w: &buf}
	on.show("a")
	on.show("a")
	on.show("b")
	on.done()
	if buf.String() != "\r\x1b[Ka\r\x1b[Kb\r\x1b[K" {
		t.Errorf("terminal output %q", buf.String())
	}
}
