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

func TestValidateExternalID(t *testing.T) {
	if err := csi.ValidateExternalID("external ID", "vol/with spaces:and-colons"); err != nil {
		t.Fatalf("external IDs may hold any bytes: %v", err)
	}
	if err := csi.ValidateExternalID("external ID", ""); !errors.Is(err, csi.ErrInvalidID) {
		t.Fatalf("empty external ID: %v", err)
	}
	if err := csi.ValidateExternalID("external ID", strings.Repeat("x", 129)); !errors.Is(err, csi.ErrInvalidID) {
		t.Fatalf("long external ID: %v", err)
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
