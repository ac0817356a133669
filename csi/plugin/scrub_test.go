package plugin

import (
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
)

// TestScrub_OverlappingSecrets: when one secret value contains another,
// no part of the longer one survives, whatever order the map yields.
func TestScrub_OverlappingSecrets(t *testing.T) {
	secrets := csi.Secrets{"user": "admin", "password": "admin-s3cr3t-tail", "empty": ""}
	msg := `login "admin" with "admin-s3cr3t-tail" refused`
	want := `login "[redacted]" with "[redacted]" refused`
	// Map iteration order varies; repeat so a wrong order shows up.
	for range 50 {
		got := scrub(msg, secrets)
		if got != want {
			t.Fatalf("scrub = %q, want %q", got, want)
		}
		if strings.Contains(got, "s3cr3t") {
			t.Fatalf("part of a secret survived: %q", got)
		}
	}
}
