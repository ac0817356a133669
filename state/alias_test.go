package state_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// registry is a store with a healthy monolith of plugins "hp" and "nfs"
// on n1, the allocation web-1 there, and the volume default/backing-db
// (external volume "pv-7" of hp) claimed by web-1.
type registry struct {
	t   *testing.T
	s   *state.MemStore
	idx uint64
}

func newRegistry(t *testing.T) *registry {
	t.Helper()
	r := &registry{t: t, s: newMemStore(t)}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var infos []csi.PluginInfo
	for _, p := range []string{"hp", "nfs"} {
		infos = append(infos, csi.PluginInfo{PluginID: p, Type: csi.PluginTypeMonolith, Healthy: true, UpdateTime: at,
			ControllerInfo: &csi.ControllerInfo{}, NodeInfo: &csi.NodeInfo{ID: "csi-n1"}})
	}
	r.must(state.UpsertNodePlugins{NodeID: "n1", Plugins: infos})
	r.must(state.UpsertAllocations{Allocations: []csi.Allocation{{ID: "web-1", Namespace: "default", NodeID: "n1"}}})
	r.must(state.RegisterVolume{Volume: regVolume("default", "backing-db", "hp", "pv-7")})
	r.must(state.ClaimVolume{Namespace: "default", VolumeID: "backing-db", Claim: csi.Claim{AllocationID: "web-1", NodeID: "n1",
		Mode: csi.ClaimWrite, AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}})
	return r
}

func regVolume(ns, id, plugin, ext string) csi.Volume {
	return csi.Volume{ID: id, Namespace: ns, ExternalID: ext, PluginID: plugin,
		Capabilities: []csi.Capability{{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}}}
}

func (r *registry) apply(cmd state.Command) (state.Result, error) {
	r.idx++
	return r.s.Apply(r.idx, cmd)
}

func (r *registry) must(cmd state.Command) {
	r.t.Helper()
	if _, err := r.apply(cmd); err != nil {
		r.t.Fatalf("apply %s: %v", cmd.Kind(), err)
	}
}

// refuse applies cmd, which must fail matching want and change nothing.
func (r *registry) refuse(t *testing.T, cmd state.Command, want error) error {
	t.Helper()
	before := snapshotBytes(t, r.s)
	res, err := r.apply(cmd)
	if !errors.Is(err, want) {
		t.Fatalf("apply %s: %v, want an error matching %q", cmd.Kind(), err, want)
	}
	if res.Changed {
		t.Errorf("apply %s: refused, but Result.Changed", cmd.Kind())
	}
	if after := snapshotBytes(t, r.s); string(after) != string(before) {
		t.Errorf("refused %s changed the store", cmd.Kind())
	}
	return err
}

func TestRegisterVolume_ExternalIDTaken(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ns, id  string
		mention string // in the error's text
		hide    string // not in it
	}{
		{"OtherNamespace", "other", "alias", "another namespace", "backing-db"},
		{"SameNamespace", "default", "alias", "default/backing-db", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRegistry(t)
			err := r.refuse(t, state.RegisterVolume{Volume: regVolume(tc.ns, tc.id, "hp", "pv-7")}, csi.ErrVolumeExists)
			var taken *state.ExternalIDTakenError
			if !errors.As(err, &taken) {
				t.Fatalf("error %q is not an *ExternalIDTakenError", err)
			}
			want := state.ExternalIDTakenError{Volume: state.VolumeKey{Namespace: tc.ns, ID: tc.id}, PluginID: "hp", ExternalID: "pv-7",
				Holder: state.VolumeKey{Namespace: "default", ID: "backing-db"}}
			if *taken != want {
				t.Errorf("ExternalIDTakenError = %+v, want %+v", *taken, want)
			}
			msg := err.Error()
			for _, m := range []string{tc.ns + "/" + tc.id, `"pv-7"`, "hp", tc.mention} {
				if !strings.Contains(msg, m) {
					t.Errorf("error %q does not name %q", msg, m)
				}
			}
			if tc.hide != "" && strings.Contains(msg, tc.hide) {
				t.Errorf("error %q names %q, a volume of another namespace", msg, tc.hide)
			}
			// The alias is not there to deregister (and so to delete
			// the backing volume through); the holder is untouched.
			if _, err := r.apply(state.DeregisterVolume{Namespace: tc.ns, VolumeID: tc.id}); !errors.Is(err, csi.ErrVolumeNotFound) {
				t.Errorf("deregister the refused alias: %v, want ErrVolumeNotFound", err)
			}
			if v, err := r.s.Volume("default", "backing-db"); err != nil || v == nil || v.WriteClaims["web-1"] == nil {
				t.Errorf("the holder after the refusal: %v, %v; want it with its claim", v, err)
			}
		})
	}

	t.Run("InOneBatch", func(t *testing.T) {
		r := newRegistry(t)
		err := r.refuse(t, state.Batch{Commands: []state.Command{
			state.RegisterVolume{Volume: regVolume("default", "a", "hp", "pv-9")},
			state.RegisterVolume{Volume: regVolume("other", "b", "hp", "pv-9")},
		}}, csi.ErrVolumeExists)
		var taken *state.ExternalIDTakenError
		if !errors.As(err, &taken) || taken.Holder != (state.VolumeKey{Namespace: "default", ID: "a"}) {
			t.Errorf("error %q: want an *ExternalIDTakenError naming holder default/a", err)
		}
	})

	t.Run("Allowed", func(t *testing.T) {
		r := newRegistry(t)
		for _, c := range []state.Command{
			// The holder registers itself again (an update).
			state.RegisterVolume{Volume: regVolume("default", "backing-db", "hp", "pv-7")},
			// Another plugin's external volume of the same ID.
			state.RegisterVolume{Volume: regVolume("other", "alias", "nfs", "pv-7")},
			state.RegisterVolume{Volume: regVolume("other", "pv8", "hp", "pv-8")},
		} {
			if _, err := r.apply(c); err != nil {
				t.Errorf("apply %+v: %v", c, err)
			}
		}
	})

	// memdb ends each part of a compound key with a NUL, so an external
	// ID holding one could alias another's key: "pv-8\x00other" against
	// "pv-8". Such an ID is refused before it reaches an index.
	t.Run("NULRefused", func(t *testing.T) {
		r := newRegistry(t)
		r.must(state.RegisterVolume{Volume: regVolume("other", "pv8", "hp", "pv-8")})
		_, err := r.apply(state.RegisterVolume{Volume: regVolume("x", "nul", "hp", "pv-8\x00other")})
		if !errors.Is(err, csi.ErrInvalidID) {
			t.Fatalf("external ID with a NUL: %v, want ErrInvalidID", err)
		}
	})

	t.Run("FreeAfterDeregister", func(t *testing.T) {
		r := newRegistry(t)
		r.must(state.RegisterVolume{Volume: regVolume("default", "spare", "hp", "pv-1")})
		r.must(state.DeregisterVolume{Namespace: "default", VolumeID: "spare"})
		r.must(state.RegisterVolume{Volume: regVolume("other", "spare", "hp", "pv-1")})
		// Moved within one batch.
		r.must(state.Batch{Commands: []state.Command{
			state.DeregisterVolume{Namespace: "other", VolumeID: "spare"},
			state.RegisterVolume{Volume: regVolume("default", "moved", "hp", "pv-1")},
		}})
		if v, err := r.s.Volume("default", "moved"); err != nil || v == nil {
			t.Errorf("default/moved: %v, %v", v, err)
		}
	})

	t.Run("SnapshotRestoreKeepsCheck", func(t *testing.T) {
		r := newRegistry(t)
		snap := snapshotBytes(t, r.s)
		s2 := newMemStore(t)
		if err := s2.Restore(t.Context(), strings.NewReader(string(snap))); err != nil {
			t.Fatalf("Restore: %v", err)
		}
		r.s = s2
		r.refuse(t, state.RegisterVolume{Volume: regVolume("other", "alias", "hp", "pv-7")}, csi.ErrVolumeExists)
	})
}
