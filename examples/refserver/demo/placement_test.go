package demo_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/demo"
)

func TestRunPlacement(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out := &syncBuffer{}
	res, err := demo.RunPlacement(ctx, demo.Config{DataDir: shortTempDir(t), Out: out, Mount: hostpath.MountSymlink})
	if err != nil {
		t.Fatalf("placement demo: %v\noutput:\n%s", err, out)
	}
	if got := csi.TopologiesString(res.VolumeTopologies); got != "{zone=a}" {
		t.Errorf("volume topologies %s, want {zone=a} (the controller's node)", got)
	}
	want := map[string]csi.Reasons{"node-1": 0, "node-2": 0, "node-3": csi.ReasonTopology}
	if len(res.Feasibility.Nodes) != len(want) {
		t.Fatalf("feasibility of %d nodes, want %d: %+v", len(res.Feasibility.Nodes), len(want), res.Feasibility.Nodes)
	}
	for _, n := range res.Feasibility.Nodes {
		if n.Reasons != want[n.NodeID] {
			t.Errorf("node %s: reasons %v, want %v", n.NodeID, n.Reasons, want[n.NodeID])
		}
	}
	if !errors.Is(res.Refusal, csi.ErrTopologyMismatch) {
		t.Errorf("refusal %v does not match ErrTopologyMismatch", res.Refusal)
	}
	if res.ClaimedOn != "node-1" {
		t.Errorf("claimed on %s, want node-1 (the first feasible node)", res.ClaimedOn)
	}
	requireInOrder(t, out.String(),
		"[demo] starting a server and three node agents",
		"[demo] volume zonal-vol is accessible from {zone=a}",
		"[demo] feasibility of a write claim on node-1 {zone=a}: feasible",
		"[demo] feasibility of a write claim on node-3 {zone=b}: topology",
		"[demo] the claim on node-3 is refused: ",
		"volume zonal-vol is accessible from {zone=a} and node node-3 is in {zone=b}",
		"[demo] claimed on node-1, in the volume's zone",
		"[demo] done: ",
	)
}
