package rpcshim_test

import (
	"errors"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/rpcshim"
)

func TestNodeEndpoint_NodeExpand_Refusals(t *testing.T) {
	// The endpoints of newSrvEnv have a recording Unmounter, which cannot
	// expand.
	e := newSrvEnv(t, csi.ControllerCapabilities{})
	req := &rpcshim.NodeExpandRequest{NodeID: "n2", Namespace: "default", VolumeID: "v", RequiredBytes: 1}
	_, err := e.router.NodeExpand(t.Context(), req)
	if !errors.Is(err, csi.ErrNotSupported) {
		t.Errorf("node expand on an endpoint without an Expander: %v, want ErrNotSupported", err)
	}
	// A call meant for another node is refused by the one it reached.
	err = e.tr.Call(t.Context(), "n3", rpcshim.MethodNodeExpand, req, new(rpcshim.NodeExpandResponse))
	if !errors.Is(err, csi.ErrUnavailable) {
		t.Errorf("misrouted node expand: %v, want ErrUnavailable", err)
	}
	e.statuses.Set("n2", csi.NodeStatusGone)
	if _, err := e.router.NodeExpand(t.Context(), req); !errors.Is(err, csi.ErrNodeNotFound) {
		t.Errorf("node expand on a gone node: %v, want ErrNodeNotFound", err)
	}
}

func TestServer_ExpandVolume_GoneNodeDropped(t *testing.T) {
	c := newXPCluster(t, bothExpand)
	c.volume(t)
	c.claimAndMount(t, "web-1", "n1")
	c.claimAndMount(t, "web-2", "n2")
	c.statuses.Set("n2", csi.NodeStatusGone)
	resp, err := c.expand(t, 4<<20)
	must(t, err)
	expectEqual(t, len(resp.PendingNodes), 0)
	e := c.stored(t).Expansion
	expectEqual(t, e.State, csi.ExpansionDone)
	expectEqual(t, e.DoneNodes, []string{"n1"}) // n2 left with its mounts
	expectEqual(t, c.nodes["n2"].plugin.CallCount(csitest.MethodNodeExpandVolume), 0)
}
