package rpcshim_test

import (
	"context"
	"testing"
	"time"

	"github.com/csikit/csikit/capacity"
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/rpcshim"
)

// refreshes tells the test each time the refresher has refreshed a
// plugin.
type refreshes chan bool

func (r refreshes) Refreshed(_ string, _, _ int, changed bool, _ error) { r <- changed }

// TestServer_CapacityFollowsCreateAndDelete wires the capacity
// refresher the way a host does: GetCapacity through the Router, the
// Server kicking it after each create and delete. The zone's capacity
// in the state drops by the volume's size after the create and comes
// back after the delete, with no interval passing.
func TestServer_CapacityFollowsCreateAndDelete(t *testing.T) {
	const gib = int64(1) << 30
	e := newPlaceEnvWith(t, true, map[string]*csi.Topology{"n1": zoneA, "n3": zoneB}, func(c *csitest.Config) {
		c.Controller.GetCapacity = true
		c.Pools = []csitest.Pool{{Topology: zoneA, Capacity: 10 * gib}, {Topology: zoneB, Capacity: 10 * gib}}
	})
	seen := make(refreshes, 16)
	ref, err := capacity.New(capacity.Config{
		Store: e.store, Applier: e.applier, Controllers: capacity.ControllerFunc(e.router.CapacityOf),
		Interval: time.Hour, Clock: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), Observer: seen,
	})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ref.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	server, err := rpcshim.NewServer(rpcshim.ServerConfig{Store: e.store, Applier: e.applier, Router: e.router, Capacity: ref})
	must(t, err)

	available := func(want string) int64 {
		t.Helper()
		select {
		case <-seen:
		case <-time.After(10 * time.Second):
			t.Fatalf("no capacity refresh %s", want)
		}
		recs, err := e.store.Capacity(rtPlugin)
		must(t, err)
		for _, r := range recs {
			if r.Topology.String() == "zone=b" {
				return r.Available
			}
		}
		t.Fatalf("no capacity record for zone b %s: %+v", want, recs)
		return 0
	}
	expectEqual(t, available("at start"), 10*gib)

	_, err = server.CreateVolume(ctx, &rpcshim.VolumeCreateRequest{
		Volume: csi.Volume{ID: "vol-b", Namespace: "default", PluginID: rtPlugin, Capabilities: []csi.Capability{snwFS},
			RequestedCapacityMin: gib},
		Nodes: []string{"n3"},
	})
	must(t, err)
	expectEqual(t, available("after the create"), 9*gib)

	_, err = server.DeleteVolume(ctx, &rpcshim.VolumeDeleteRequest{Namespace: "default", VolumeID: "vol-b"})
	must(t, err)
	expectEqual(t, available("after the delete"), 10*gib)
}
