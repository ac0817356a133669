package statetest

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

func snap(ns, id, volID string) csi.Snapshot {
	return csi.Snapshot{
		Namespace: ns, ID: id, SourceVolumeID: volID, ExternalID: "snap-" + ns + "-" + id, PluginID: pluginEBS,
		Size: 1 << 30, CreatedAt: t0, ReadyToUse: true, Secrets: csi.Secrets{"key": "s3cret"},
	}
}

func snapIDs(ss []*csi.Snapshot) []string {
	out := []string{}
	for _, s := range ss {
		out = append(out, s.Namespace+"/"+s.ID)
	}
	return out
}

// volumeSnapshots checks RegisterSnapshot, DeleteSnapshot and the
// SnapshotReader reads.
func (s suite) volumeSnapshots(t *testing.T) {
	t.Run("IntentThenComplete", s.snapshotIntentThenComplete)
	t.Run("Refused", s.snapshotRefused)
	t.Run("DeletingIsOneWay", s.snapshotDeletingIsOneWay)
	t.Run("Lookups", s.snapshotLookups)
	t.Run("OutlivesSourceVolume", s.snapshotOutlivesSourceVolume)
	t.Run("StateSnapshotCarriesRows", s.snapshotStateSnapshotCarriesRows)
}

func (s suite) snapshotIntentThenComplete(t *testing.T) {
	w := s.standard(t)
	before := w.index(t, state.TableVolumes)
	intent := csi.Snapshot{Namespace: nsDefault, ID: "s1", SourceVolumeID: "data", PluginID: pluginEBS, Creating: true}
	w.must(t, state.RegisterSnapshot{Snapshot: intent})
	if after := w.index(t, state.TableVolumes); after <= before {
		t.Errorf("TableVolumes index %d after RegisterSnapshot, was %d", after, before)
	}
	got, err := w.s.VolumeSnapshot(nsDefault, "s1")
	if err != nil || !got.Creating || got.SourceExternalID != "vol-default-data" {
		t.Fatalf("VolumeSnapshot = %+v, %v; want the intent with the source's external ID", got, err)
	}
	w.noop(t, state.RegisterSnapshot{Snapshot: intent})
	done := snap(nsDefault, "s1", "data")
	w.must(t, state.RegisterSnapshot{Snapshot: done})
	got, _ = w.s.VolumeSnapshot(nsDefault, "s1")
	if got.Creating || got.ExternalID != done.ExternalID || !got.ReadyToUse || got.CreateIndex == got.ModifyIndex {
		t.Errorf("completed snapshot = %+v", got)
	}
	w.noop(t, state.RegisterSnapshot{Snapshot: done})
	// The caller owns the copy.
	got.Secrets["key"] = "x"
	if again, _ := w.s.VolumeSnapshot(nsDefault, "s1"); again.Secrets["key"] != "s3cret" {
		t.Error("changing a returned snapshot changed the store")
	}
}

func (s suite) snapshotRefused(t *testing.T) {
	w := s.standard(t)
	w.must(t, state.RegisterSnapshot{Snapshot: snap(nsDefault, "s1", "data")})
	other := snap(nsDefault, "s2", "data")
	other.ExternalID = "snap-default-s1"
	cases := []struct {
		name string
		cmd  state.Command
		want error
	}{
		{"SourceMissing", state.RegisterSnapshot{Snapshot: snap(nsDefault, "s9", "nope")}, csi.ErrVolumeNotFound},
		{"SourceInOtherNamespace", state.RegisterSnapshot{Snapshot: snap(nsOther, "s9", "logs")}, csi.ErrVolumeNotFound},
		{"PluginMissing", state.RegisterSnapshot{Snapshot: func() csi.Snapshot { x := snap(nsDefault, "s9", ""); x.PluginID = "nope"; return x }()}, csi.ErrPluginNotFound},
		{"ExternalTaken", state.RegisterSnapshot{Snapshot: other}, csi.ErrSnapshotExists},
		{"SourceChanged", state.RegisterSnapshot{Snapshot: snap(nsDefault, "s1", "logs")}, csi.ErrSnapshotExists},
		{"ExternalChanged", state.RegisterSnapshot{Snapshot: func() csi.Snapshot { x := snap(nsDefault, "s1", "data"); x.ExternalID = "z"; return x }()}, csi.ErrSnapshotExists},
		{"BackToCreating", state.RegisterSnapshot{Snapshot: csi.Snapshot{Namespace: nsDefault, ID: "s1", SourceVolumeID: "data", PluginID: pluginEBS, Creating: true}}, csi.ErrSnapshotExists},
		{"IntentWithExternalID", state.RegisterSnapshot{Snapshot: func() csi.Snapshot { x := snap(nsDefault, "s9", "data"); x.Creating = true; return x }()}, csi.ErrInvalidRequest},
		{"NoExternalID", state.RegisterSnapshot{Snapshot: func() csi.Snapshot { x := snap(nsDefault, "s9", "data"); x.ExternalID = ""; return x }()}, csi.ErrInvalidID},
		{"NegativeSize", state.RegisterSnapshot{Snapshot: func() csi.Snapshot { x := snap(nsDefault, "s9", "data"); x.Size = -1; return x }()}, csi.ErrInvalidRequest},
		{"BadID", state.RegisterSnapshot{Snapshot: snap(nsDefault, "../s", "data")}, csi.ErrInvalidID},
		{"DeleteMissing", state.DeleteSnapshot{Namespace: nsDefault, SnapshotID: "nope"}, csi.ErrSnapshotNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { w.refuse(t, c.cmd, c.want) })
	}
}

func (s suite) snapshotDeletingIsOneWay(t *testing.T) {
	w := s.standard(t)
	x := snap(nsDefault, "s1", "data")
	w.must(t, state.RegisterSnapshot{Snapshot: x})
	x.Deleting = true
	w.must(t, state.RegisterSnapshot{Snapshot: x})
	x.Deleting = false
	w.refuse(t, state.RegisterSnapshot{Snapshot: x}, csi.ErrSnapshotExists)
	w.must(t, state.DeleteSnapshot{Namespace: nsDefault, SnapshotID: "s1"})
	if _, err := w.s.VolumeSnapshot(nsDefault, "s1"); !errors.Is(err, csi.ErrSnapshotNotFound) {
		t.Errorf("VolumeSnapshot after delete: %v, want ErrSnapshotNotFound", err)
	}
}

func (s suite) snapshotLookups(t *testing.T) {
	w := s.standard(t)
	w.must(t, state.RegisterSnapshot{Snapshot: snap(nsDefault, "b", "data")})
	w.must(t, state.RegisterSnapshot{Snapshot: snap(nsDefault, "a", "logs")})
	w.must(t, state.RegisterSnapshot{Snapshot: snap(nsDefault, "c", "data")})
	w.must(t, state.RegisterSnapshot{Snapshot: snap(nsOther, "a", "data")})
	w.must(t, state.RegisterSnapshot{Snapshot: snap(nsDefault, "ext", "")})
	for _, c := range []struct {
		name string
		read func() ([]*csi.Snapshot, error)
		want string
	}{
		{"All", func() ([]*csi.Snapshot, error) { return w.s.Snapshots("") }, "default/a default/b default/c default/ext other/a"},
		{"Namespace", func() ([]*csi.Snapshot, error) { return w.s.Snapshots(nsOther) }, "other/a"},
		{"Plugin", func() ([]*csi.Snapshot, error) { return w.s.SnapshotsByPlugin(pluginEBS) }, "default/a default/b default/c default/ext other/a"},
		{"Volume", func() ([]*csi.Snapshot, error) { return w.s.SnapshotsByVolume(nsDefault, "data") }, "default/b default/c"},
		{"NoneIsEmpty", func() ([]*csi.Snapshot, error) { return w.s.SnapshotsByVolume(nsDefault, "solo") }, ""},
	} {
		got, err := c.read()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if ids := strings.Join(snapIDs(got), " "); ids != c.want {
			t.Errorf("%s = %q, want %q", c.name, ids, c.want)
		}
	}
}

func (s suite) snapshotOutlivesSourceVolume(t *testing.T) {
	w := s.standard(t)
	w.must(t, state.RegisterSnapshot{Snapshot: snap(nsDefault, "s1", "data")})
	w.must(t, state.DeregisterVolume{Namespace: nsDefault, VolumeID: "data"})
	got, err := w.s.SnapshotsByVolume(nsDefault, "data")
	if err != nil || len(got) != 1 {
		t.Fatalf("SnapshotsByVolume after the source went: %v, %v; want the snapshot kept", snapIDs(got), err)
	}
}

func (s suite) snapshotStateSnapshotCarriesRows(t *testing.T) {
	w := s.standard(t)
	w.must(t, state.RegisterSnapshot{Snapshot: snap(nsDefault, "s1", "data")})
	w.must(t, state.RegisterSnapshot{Snapshot: csi.Snapshot{Namespace: nsDefault, ID: "s2", SourceVolumeID: "logs", PluginID: pluginEBS, Creating: true}})
	sn := snapshotter(t, w)
	b := snapshot(t, sn)
	r := s.empty(t)
	if err := snapshotter(t, r).Restore(context.Background(), bytes.NewReader(b)); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	a, _ := w.s.Snapshots("")
	got, _ := r.s.Snapshots("")
	if len(a) != 2 || !reflect.DeepEqual(a, got) {
		t.Errorf("restored snapshots %s, want %s", toJSON(got), toJSON(a))
	}
}
