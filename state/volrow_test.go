package state

import (
	"reflect"
	"testing"

	"github.com/csikit/csikit/csi"
	"pgregory.net/rapid"
)

// genStrings draws a string map as a stored volume may hold it: nil or
// non-empty, with keys and values that are empty, hold NUL bytes, or are
// long enough to need a multi-byte length.
func genStrings(t *rapid.T, label string) map[string]string {
	str := rapid.OneOf(
		rapid.Just(""),
		rapid.StringMatching(`[a-z\x00]{1,8}`),
		rapid.StringN(120, 300, -1),
	)
	m := rapid.MapOfN(str, str, 0, 6).Draw(t, label)
	if len(m) == 0 {
		return nil
	}
	return m
}

func genVolume(t *rapid.T) *csi.Volume {
	v := &csi.Volume{
		ID: "v", Namespace: "default", ExternalID: "x", PluginID: "p",
		Parameters: genStrings(t, "parameters"),
		Context:    genStrings(t, "context"),
		Secrets:    genStrings(t, "secrets"),
	}
	modes := []csi.AccessMode{csi.AccessModeSingleNodeWriter, csi.AccessModeMultiNodeMultiWriter, csi.AccessModeMultiNodeReaderOnly}
	for i := range rapid.IntRange(0, inlineCaps+2).Draw(t, "caps") {
		v.Capabilities = append(v.Capabilities, csi.Capability{AccessMode: modes[i%len(modes)], AttachmentMode: csi.AttachmentModeFileSystem})
	}
	if rapid.Bool().Draw(t, "claim") {
		v.ReadClaims = map[string]*csi.Claim{"a": {AllocationID: "a", NodeID: "n", Mode: csi.ClaimRead}}
	}
	return v
}

// TestVolRow_RoundTrip checks that a row gives back exactly the volume it
// was made from, that equal volumes make equal rows, that a clone holds
// no pointer into the original row, and that maps() hands out new maps.
func TestVolRow_RoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := genVolume(t)
		want := v.Copy()
		r := newVolRow(v.Copy())
		if got := r.full(); !reflect.DeepEqual(got, want) {
			t.Fatalf("full() = %#v\nwant %#v", got, want)
		}
		if again := newVolRow(want.Copy()); !reflect.DeepEqual(again, r) {
			t.Fatalf("two rows of one volume differ")
		}
		if len(r.v.Parameters)+len(r.v.Context)+len(r.v.Secrets) != 0 {
			t.Fatalf("the row's volume keeps attribute maps")
		}
		c := r.clone()
		if !reflect.DeepEqual(c, r) {
			t.Fatalf("clone differs from the row")
		}
		// Inline capabilities point into the clone itself, so a clone
		// never keeps the row it was made from alive.
		if n := len(c.v.Capabilities); n > 0 && n <= inlineCaps && &c.v.Capabilities[0] != &c.caps[0] {
			t.Fatalf("a clone's %d inline capabilities point outside it", n)
		}
		p, ctx, sec := r.attrs.maps()
		p2, ctx2, sec2 := r.attrs.maps()
		if len(p) > 0 {
			for k := range p {
				p[k] = "changed"
			}
			if !reflect.DeepEqual(p2, want.Parameters) || !reflect.DeepEqual(ctx2, want.Context) || !reflect.DeepEqual(sec2, want.Secrets) {
				t.Fatalf("maps() returned shared maps")
			}
		}
		_, _ = ctx, sec
	})
}

func TestVolRow_AttrsDiffer(t *testing.T) {
	base := map[string]string{"a": "1", "b": "2"}
	for _, tc := range []struct {
		name    string
		a, b, c map[string]string
	}{
		{"value", map[string]string{"a": "1", "b": "3"}, nil, nil},
		{"key", map[string]string{"a": "1", "c": "2"}, nil, nil},
		{"moved to context", nil, base, nil},
		{"moved to secrets", nil, nil, base},
		{"split", map[string]string{"a": "1"}, map[string]string{"b": "2"}, nil},
		{"boundary", map[string]string{"a": "12", "b": ""}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if reflect.DeepEqual(flattenAttrs(base, nil, nil), flattenAttrs(tc.a, tc.b, tc.c)) {
				t.Errorf("attributes %v %v %v flatten like %v", tc.a, tc.b, tc.c, base)
			}
		})
	}
}
