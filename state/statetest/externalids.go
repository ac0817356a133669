package statetest

import (
	"errors"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// externalIDs checks that a backing volume (plugin, external ID) has one
// volume record: a second registration of it, in any namespace, is
// refused with a *state.ExternalIDTakenError naming the holder, so that
// deleting an alias can never delete a volume another record claims.
func (s suite) externalIDs(t *testing.T) {
	held := volume(nsDefault, "data", pluginEBS, fsSNW) // the standard world's default/data
	alias := func(ns, id string) state.RegisterVolume {
		v := volume(ns, id, pluginEBS, fsSNW)
		v.ExternalID = held.ExternalID
		return state.RegisterVolume{Volume: v}
	}
	for _, tc := range []struct {
		name, ns string
		named    bool // the error's text names the holder
	}{
		{"OtherNamespace", nsOther, false},
		{"SameNamespace", nsDefault, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := s.standard(t)
			w.must(t, claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)))
			err := w.refuseErr(t, alias(tc.ns, "alias"), csi.ErrVolumeExists, tc.ns+"/alias", held.ExternalID, pluginEBS)
			var taken *state.ExternalIDTakenError
			if !errors.As(err, &taken) {
				t.Fatalf("error %q is not an *state.ExternalIDTakenError", err)
			}
			if want := (state.VolumeKey{Namespace: nsDefault, ID: "data"}); taken.Holder != want {
				t.Errorf("Holder = %+v, want %+v", taken.Holder, want)
			}
			if named := strings.Contains(err.Error(), nsDefault+"/data"); named != tc.named {
				t.Errorf("error %q names the holder: %t, want %t", err, named, tc.named)
			}
			w.refuse(t, state.DeregisterVolume{Namespace: tc.ns, VolumeID: "alias"}, csi.ErrVolumeNotFound)
		})
	}

	t.Run("InOneBatch", func(t *testing.T) {
		w := s.standard(t)
		a, b := volume(nsDefault, "a", pluginEBS, fsSNW), volume(nsOther, "b", pluginEBS, fsSNW)
		b.ExternalID = a.ExternalID
		w.refuse(t, state.Batch{Commands: []state.Command{state.RegisterVolume{Volume: a}, state.RegisterVolume{Volume: b}}},
			csi.ErrVolumeExists, "other/b")
	})

	t.Run("FreeAgainAfterDeregister", func(t *testing.T) {
		w := s.standard(t)
		w.noop(t, state.RegisterVolume{Volume: held})
		w.must(t, state.DeregisterVolume{Namespace: nsDefault, VolumeID: "data"})
		w.must(t, alias(nsOther, "alias"))
	})
}
