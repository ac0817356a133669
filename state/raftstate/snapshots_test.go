package raftstate_test

import (
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// TestServer_Apply_SnapshotReplicates writes a snapshot intent and its
// completion on the leader and reads the same record on every
// follower: the snapshot commands go through the log like the others.
func TestServer_Apply_SnapshotReplicates(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	leader := c.leader()
	apply(t, leader.srv, fingerprintCmd())
	apply(t, leader.srv, volumeCmd("data"))
	intent := csi.Snapshot{Namespace: "default", ID: "s1", SourceVolumeID: "data", PluginID: testPlugin, Creating: true}
	apply(t, leader.srv, state.RegisterSnapshot{Snapshot: intent})
	done := intent
	done.Creating, done.ExternalID, done.ReadyToUse, done.Size = false, "snap-1", true, 4096
	res := apply(t, leader.srv, state.RegisterSnapshot{Snapshot: done})
	want := indexes(t, leader.store)
	for _, f := range c.followers(leader) {
		waitIndexes(t, f.store, want)
		got, err := f.store.VolumeSnapshot("default", "s1")
		must(t, err)
		expectEqual(t, got.ExternalID, "snap-1")
		expectEqual(t, got.ModifyIndex, res.Index)
		expectEqual(t, got.SourceExternalID, "ext-data")
	}
	apply(t, leader.srv, state.DeleteSnapshot{Namespace: "default", SnapshotID: "s1"})
	want = indexes(t, leader.store)
	for _, f := range c.followers(leader) {
		waitIndexes(t, f.store, want)
		if _, err := f.store.VolumeSnapshot("default", "s1"); err == nil {
			t.Errorf("follower still has the deleted snapshot")
		}
	}
}
