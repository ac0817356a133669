package rpcshim_test

import (
	"errors"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/health"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// Through the router and the node endpoints on the in-memory transport:
// the monitor reads each node's usage and condition of a mounted
// volume at the paths the node's mounter tracks, and skips a node whose
// plugin does not advertise GET_VOLUME_STATS.
func TestRouter_HealthNodes_UsageReachesRecord(t *testing.T) {
	c := newXPCluster(t, xpConfig{stats: map[string]bool{"n1": true}})
	c.volume(t)
	c.claimAndMount(t, "web-1", "n1")
	c.claimAndMount(t, "web-2", "n2")
	n1 := c.nodes["n1"].plugin
	if !n1.SetVolumeUsage("ext-1", csitest.Usage{UsedBytes: 300 << 10, UsedInodes: 7, InodesTotal: 100}) ||
		!n1.SetNodeVolumeCondition("ext-1", true, "disk errors") {
		t.Fatal("node fake of n1 does not have ext-1")
	}
	m, err := health.New(health.Config{Store: c.store, Applier: c.applier, Controllers: c.router.HealthControllers(),
		Nodes: c.router.HealthNodes(), Clock: c.clock})
	must(t, err)
	must(t, m.Pass(t.Context()))

	h, err := c.store.Health("default", "data")
	must(t, err)
	if h == nil || h.Nodes["n1"] == nil {
		t.Fatalf("health record = %+v, want a report of n1", h)
	}
	// The node fake admitted the volume unknown, with no capacity.
	expectEqual(t, h.Nodes["n1"].Usage, state.Usage{BytesUsed: 300 << 10, InodesUsed: 7, InodesTotal: 100, InodesAvailable: 93})
	expectEqual(t, *h.Nodes["n1"].Condition, state.Condition{Abnormal: true, Message: "disk errors"})
	if h.Nodes["n2"] != nil {
		t.Errorf("n2 (no GET_VOLUME_STATS) has a report: %+v", h.Nodes["n2"])
	}
	expectEqual(t, c.nodes["n2"].plugin.CallCount(csitest.MethodNodeGetVolumeStats), 0)
	expectEqual(t, n1.CallCount(csitest.MethodNodeGetVolumeStats), 1)
	c.noViolations(t)
}

func TestRouter_NodeVolumeStats_Refusals(t *testing.T) {
	c := newXPCluster(t, xpConfig{stats: map[string]bool{"n1": true}})
	c.volume(t)
	c.claimAndMount(t, "web-2", "n2")
	ctx := t.Context()
	stats := func(node string) error {
		_, err := c.router.NodeVolumeStats(ctx, &rpcshim.NodeVolumeStatsRequest{NodeID: node, Namespace: "default", VolumeID: "data"})
		return err
	}
	if err := stats("n1"); !errors.Is(err, csi.ErrVolumeNotFound) {
		t.Errorf("stats on a node without the volume: %v, want ErrVolumeNotFound", err)
	}
	if err := stats("n2"); !errors.Is(err, csi.ErrNotSupported) {
		t.Errorf("stats on a node without GET_VOLUME_STATS: %v, want ErrNotSupported", err)
	}
	req := &rpcshim.NodeVolumeStatsRequest{NodeID: "n3", Namespace: "default", VolumeID: "data"}
	if err := c.tr.Call(ctx, "n1", rpcshim.MethodNodeVolumeStats, req, new(rpcshim.NodeVolumeStatsResponse)); !errors.Is(err, csi.ErrUnavailable) {
		t.Errorf("misrouted stats: %v, want ErrUnavailable", err)
	}
	c.statuses.Set("n2", csi.NodeStatusGone)
	if err := stats("n2"); !errors.Is(err, csi.ErrNodeNotFound) {
		t.Errorf("stats on a gone node: %v, want ErrNodeNotFound", err)
	}
	if _, err := c.router.NodeVolumeStats(ctx, nil); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Errorf("nil request: %v, want ErrInvalidRequest", err)
	}
}
