package csi_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/csikit/csikit/csi"
)

func TestValidateID_Table(t *testing.T) {
	cases := []struct {
		name   string
		in     string
		ok     bool
		reason string
	}{
		{"simple", "vol-1", true, ""},
		{"uuid", "8b6c0e2a-3c7f-4b8e-9d6a-1f2e3d4c5b6a", true, ""},
		{"dots inside", "a.b.c", true, ""},
		{"leading dot", ".hidden", true, ""},
		{"underscore", "my_vol", true, ""},
		{"max length", strings.Repeat("a", csi.MaxIDLength), true, ""},
		{"empty", "", false, "must not be empty"},
		{"too long", strings.Repeat("a", csi.MaxIDLength+1), false, "limit is 128"},
		{"dot", ".", false, "relative path element"},
		{"dotdot", "..", false, "relative path element"},
		{"slash", "a/b", false, "'/'"},
		{"traversal", "../etc", false, "'/'"},
		{"backslash", `a\b`, false, `'\\'`},
		{"space", "a b", false, "' '"},
		{"nul", "a\x00b", false, `'\x00'`},
		{"newline", "a\nb", false, `'\n'`},
		{"unicode", "völ", false, "byte 1"},
		{"colon", "a:b", false, "':'"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := csi.ValidateVolumeID(tc.in)
			if tc.ok {
				if err != nil {
					t.Fatalf("ValidateVolumeID(%q) = %v, want nil", tc.in, err)
				}
				return
			}
			if !errors.Is(err, csi.ErrInvalidID) {
				t.Fatalf("ValidateVolumeID(%q) = %v, want ErrInvalidID", tc.in, err)
			}
			var idErr *csi.IDError
			if !errors.As(err, &idErr) || idErr.Kind != csi.KindVolume {
				t.Fatalf("error %v is not an *IDError for the volume ID", err)
			}
			if !strings.Contains(err.Error(), tc.reason) || !strings.Contains(err.Error(), "volume ID") {
				t.Fatalf("error %q does not name the field and reason %q", err, tc.reason)
			}
			if csi.Classify(err) != csi.ClassFinal {
				t.Fatalf("invalid ID classified %v, want final", csi.Classify(err))
			}
		})
	}
}

func TestValidateID_EachKindNamesItsField(t *testing.T) {
	for _, tc := range []struct {
		fn   func(string) error
		kind string
	}{
		{csi.ValidateNamespace, "namespace"},
		{csi.ValidateVolumeID, "volume ID"},
		{csi.ValidatePluginID, "plugin ID"},
		{csi.ValidateNodeID, "node ID"},
		{csi.ValidateAllocationID, "allocation ID"},
	} {
		err := tc.fn("..")
		if err == nil || !strings.Contains(err.Error(), "invalid "+tc.kind) {
			t.Errorf("validator for %s: error %v does not name the field", tc.kind, err)
		}
		if err := tc.fn("ok-1"); err != nil {
			t.Errorf("validator for %s refused a valid ID: %v", tc.kind, err)
		}
	}
}

func TestValidateExternalID_Table(t *testing.T) {
	validators := []struct {
		name  string
		fn    func(field, s string) error
		limit int
	}{
		{"ValidateExternalID", csi.ValidateExternalID, csi.MaxIDLength},
		{"ValidateExternalNodeID", csi.ValidateExternalNodeID, csi.MaxExternalNodeIDLength},
	}
	cases := []struct {
		name   string
		in     func(limit int) string
		reason string // "" when the ID is accepted
	}{
		{"spaces, slashes and colons", func(int) string { return "vol/with spaces:and-colons" }, ""},
		{"unicode", func(int) string { return "völume-ü" }, ""},
		{"at the limit", func(n int) string { return strings.Repeat("x", n) }, ""},
		{"empty", func(int) string { return "" }, "must not be empty"},
		{"over the limit", func(n int) string { return strings.Repeat("x", n+1) }, "bytes long"},
		{"nul", func(int) string { return "vol\x00-1" }, "control character"},
		{"newline", func(int) string { return "vol\n-1" }, "control character"},
		{"escape sequence", func(int) string { return "vol\x1b[2J" }, "control character"},
		{"delete", func(int) string { return "vol\x7f" }, "control character"},
		{"C1 control", func(int) string { return "vol\u0085" }, "control character"},
		{"invalid UTF-8", func(int) string { return "vol\xff" }, "not valid UTF-8"},
	}
	for _, v := range validators {
		for _, tc := range cases {
			t.Run(v.name+"/"+tc.name, func(t *testing.T) {
				in := tc.in(v.limit)
				err := v.fn("external ID", in)
				if tc.reason == "" {
					if err != nil {
						t.Fatalf("%s(%q) = %v, want nil", v.name, in, err)
					}
					return
				}
				if !errors.Is(err, csi.ErrInvalidID) || csi.Classify(err) != csi.ClassFinal {
					t.Fatalf("%s(%q) = %v, want a final ErrInvalidID", v.name, in, err)
				}
				if msg := err.Error(); !strings.Contains(msg, tc.reason) || !strings.Contains(msg, "external ID") {
					t.Fatalf("error %q does not name the field and reason %q", msg, tc.reason)
				}
				if msg := err.Error(); !utf8.ValidString(msg) || strings.ContainsAny(msg, "\x00\n\x1b\x7f") {
					t.Fatalf("error %q carries the raw bytes it refused", msg)
				}
			})
		}
	}
	// A CSI node ID may be longer than a volume ID (spec: up to 256 bytes).
	id := strings.Repeat("n", 200)
	if csi.ValidateExternalID("volume ID", id) == nil || csi.ValidateExternalNodeID("node ID", id) != nil {
		t.Fatal("a 200-byte ID must be refused as a volume ID and accepted as a node ID")
	}
}

// FuzzValidateID checks the property the rest of csikit relies on: an ID
// that passes validation is one path element that stays inside its
// parent directory. The seed corpus in testdata/fuzz is replayed by every
// `go test` run.
func FuzzValidateID(f *testing.F) {
	for _, s := range []string{"vol", "..", ".", "a/b", "", "\x00", "a\\b", "x..y", "..a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := csi.ValidateID(csi.KindVolume, s)
		if err != nil {
			if !errors.Is(err, csi.ErrInvalidID) {
				t.Fatalf("error %v does not match ErrInvalidID", err)
			}
			if !utf8.ValidString(err.Error()) {
				t.Fatalf("error text is not valid UTF-8: %q", err.Error())
			}
			return
		}
		root := "/root/staging"
		p := filepath.Join(root, s)
		if filepath.Dir(p) != root || filepath.Base(p) != s {
			t.Fatalf("valid ID %q escapes or splits: %q", s, p)
		}
		if len(s) == 0 || len(s) > csi.MaxIDLength {
			t.Fatalf("valid ID %q has bad length %d", s, len(s))
		}
	})
}
