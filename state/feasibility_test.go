package state_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// zonalCluster is cluster with nodes alternating between zones a and b,
// each with one volume of the plugin attached (limit 16), and a volume
// "target" in zone a to place.
func zonalCluster(tb testing.TB, nodes int) *benchStore {
	b := newBenchStore(tb)
	b.clusterWith(nodes, func(i int, ni *csi.NodeInfo) {
		ni.MaxVolumes = 16
		ni.AccessibleTopology = &csi.Topology{Segments: map[string]string{"zone": string(rune('a' + i%2)), "rack": fmt.Sprint("r", i%7)}}
	})
	var cmds []state.Command
	for i := range nodes {
		v := benchVolume(i)
		cmds = append(cmds, state.RegisterVolume{Volume: v}, state.ClaimVolume{Namespace: "default", VolumeID: v.ID,
			Claim: csi.Claim{AllocationID: fmt.Sprintf("w%d", i), NodeID: fmt.Sprintf("n%d", i), Mode: csi.ClaimWrite,
				AccessMode: benchCap().AccessMode, AttachmentMode: benchCap().AttachmentMode}})
	}
	target := benchVolume(nodes)
	target.ID = "target"
	target.Topologies = []*csi.Topology{{Segments: map[string]string{"zone": "a"}}}
	cmds = append(cmds, state.RegisterVolume{Volume: target})
	b.batched(cmds)
	return b
}

func targetRequest() *state.FeasibilityRequest {
	return &state.FeasibilityRequest{Namespace: "default", VolumeID: "target",
		Claim: csi.PlacementRequest{Namespace: "default", Mode: csi.ClaimWrite, Capability: benchCap()}}
}

func TestFeasibility_NoAllocationPerNode(t *testing.T) {
	allocs := func(nodes int) float64 {
		b := zonalCluster(t, nodes)
		req := targetRequest()
		out, err := b.s.Feasibility(req, nil)
		if err != nil {
			t.Fatal(err)
		}
		feasible := 0
		for _, f := range out {
			if f.Reasons == 0 {
				feasible++
			}
		}
		if len(out) != nodes || feasible != nodes/2 {
			t.Fatalf("%d nodes: %d answers, %d feasible; want %d and %d", nodes, len(out), feasible, nodes, nodes/2)
		}
		return testing.AllocsPerRun(20, func() { out, _ = b.s.Feasibility(req, out) })
	}
	// A few allocations more for a deeper tree are fine; one per node
	// is not.
	small, large := allocs(10), allocs(1000)
	if large > small+10 {
		t.Errorf("feasibility allocates %.0f times for 10 nodes and %.0f for 1,000: it allocates per node", small, large)
	}
}

// BenchmarkFeasibility measures (median) one feasibility query of a
// zonal volume against every node of stores of 100 and 10,000 nodes,
// alternating between them, and reading the 10,000 node records alone.
// feasible-10k-vs-100 is the 10,000-node query over 100 times the
// 100-node one (goal at most 1.5); feasible-vs-scan is the 10,000-node
// query over the node reads (goal at most 2); allocs/node is what the
// 10,000-node query allocates per node checked (goal 0).
func BenchmarkFeasibility(b *testing.B) {
	small, large := zonalCluster(b, 100), zonalCluster(b, 10_000)
	req := targetRequest()
	var outS, outL []state.NodeFeasibility
	ids := make([]string, 10_000)
	for i := range ids {
		ids[i] = fmt.Sprintf("n%d", i)
	}
	var tS, tL, tScan []time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		outS, _ = small.s.Feasibility(req, outS)
		tS = append(tS, time.Since(start))
		start = time.Now()
		outL, _ = large.s.Feasibility(req, outL)
		tL = append(tL, time.Since(start))
		start = time.Now()
		for _, id := range ids {
			if _, err := large.s.Node(id); err != nil {
				b.Fatal(err)
			}
		}
		tScan = append(tScan, time.Since(start))
	}
	b.StopTimer()
	allocs := testing.AllocsPerRun(5, func() { outL, _ = large.s.Feasibility(req, outL) })
	b.ReportMetric(median(tL)/(100*median(tS)), "feasible-10k-vs-100")
	b.ReportMetric(median(tL)/median(tScan), "feasible-vs-scan")
	b.ReportMetric(median(tL)/10_000, "ns/node")
	b.ReportMetric(allocs/10_000, "allocs/node")
}
