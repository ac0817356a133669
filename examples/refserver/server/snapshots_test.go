package server_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/server"
	"github.com/csikit/csikit/rpcshim"
)

// TestServer_Snapshots_API: the snapshot routes answer, their errors
// cross the API with their sentinel, and a restore is refused across
// namespaces. Plugin "fake" has no controller, so no snapshot is made:
// the whole flow runs against the hostpath plugin in rpcshim's and the
// hostpath tests.
func TestServer_Snapshots_API(t *testing.T) {
	ts := startServer(t, server.Config{})
	fakeNode(t, ts, "n1")
	registerFakeVolume(t, ts, "db", nil)
	ctx := context.Background()
	c := ts.client
	snaps, _, err := c.Snapshots(ctx, "", "", nil)
	must(t, err)
	if snaps == nil || len(snaps) != 0 {
		t.Errorf("Snapshots = %#v, want an empty list", snaps)
	}
	tests := []struct {
		name   string
		call   func() error
		want   error
		status int
	}{
		{"unknown snapshot", func() error { _, _, err := c.Snapshot(ctx, "default", "nope", nil); return err }, csi.ErrSnapshotNotFound, http.StatusNotFound},
		{"delete unknown snapshot", func() error { _, err := c.DeleteSnapshot(ctx, "default", "nope"); return err }, csi.ErrSnapshotNotFound, http.StatusNotFound},
		{"bad snapshot ID", func() error { _, err := c.CreateSnapshot(ctx, "default", "db", "bad!id", nil); return err }, csi.ErrInvalidID, http.StatusBadRequest},
		{"snapshot of an unknown volume", func() error { _, err := c.CreateSnapshot(ctx, "default", "nope", "s1", nil); return err }, csi.ErrVolumeNotFound, http.StatusNotFound},
		{"snapshot without a controller", func() error { _, err := c.CreateSnapshot(ctx, "default", "db", "s1", nil); return err }, csi.ErrNoController, http.StatusServiceUnavailable},
		{"restore across namespaces", func() error {
			_, err := c.CreateVolume(ctx, &rpcshim.VolumeCreateRequest{From: &rpcshim.VolumeSource{Namespace: "other", SnapshotID: "s1"},
				Volume: csi.Volume{ID: "copy", Namespace: "default", PluginID: "fake", Capabilities: []csi.Capability{snwFS}}})
			return err
		}, csi.ErrNamespaceMismatch, http.StatusBadRequest},
		{"restore of an unknown snapshot", func() error {
			_, err := c.CreateVolume(ctx, &rpcshim.VolumeCreateRequest{From: &rpcshim.VolumeSource{SnapshotID: "s1"},
				Volume: csi.Volume{ID: "copy", Namespace: "default", PluginID: "fake", Capabilities: []csi.Capability{snwFS}}})
			return err
		}, csi.ErrSnapshotNotFound, http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			var ae *api.Error
			if errors.As(err, &ae) && ae.StatusCode != tt.status {
				t.Errorf("HTTP status %d, want %d", ae.StatusCode, tt.status)
			}
		})
	}
	if _, _, err := c.Snapshot(ctx, "default", "s1", nil); !errors.Is(err, csi.ErrSnapshotNotFound) {
		t.Errorf("after the refused snapshot: %v, want no record", err)
	}
}
