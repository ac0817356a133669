package plugintest

import (
	"testing"
)

func TestUnknownID_KeepsShape(t *testing.T) {
	for _, id := range []string{
		"vol-0123456789abcdef0123456789abcdef", // hostpath: hex
		"vol-1", "disk-0042", "ABC-def", "x", "pvc-7f3a/..", "---",
	} {
		t.Run(id, func(t *testing.T) {
			for range 50 {
				u := unknownID(id)
				if u == id {
					t.Fatalf("unknownID(%q) returned the ID itself", id)
				}
				if len(id) == len("vol-0123456789abcdef0123456789abcdef") && len(u) != len(id) {
					t.Fatalf("unknownID(%q) = %q changed the length of a fixed-length ID", id, u)
				}
			}
		})
	}
	// A hex ID stays hex, with its prefix.
	u := unknownID("vol-0123456789abcdef0123456789abcdef")
	if u[:4] != "vol-" {
		t.Errorf("prefix lost: %q", u)
	}
	for _, c := range u[4:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			t.Errorf("%q is not hex", u)
		}
	}
	// A counter grows past any counter another run reached.
	if u := unknownID("vol-1"); len(u) != len("vol-1")+9 {
		t.Errorf("unknownID(vol-1) = %q; want ten digits", u)
	}
}
