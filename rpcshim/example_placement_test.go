package rpcshim_test

import (
	"context"
	"fmt"
	"log"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// A scheduler asks, before it places an allocation, which nodes can take
// a write claim on a volume of zone b. The plugin runs on three nodes in
// two zones; the answer names the reasons per node.
func ExampleServer_Feasibility() {
	ctx := context.Background()
	check := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	store, err := state.NewMemStore(state.Config{})
	check(err)
	applier := state.NewLocalApplier(store)
	for node, zone := range map[string]string{"n1": "a", "n2": "a", "n3": "b"} {
		_, err := applier.Apply(ctx, state.UpsertNodePlugins{NodeID: node, Plugins: []csi.PluginInfo{{
			PluginID: "zonal", AllocationID: "plugin-" + node, Type: csi.PluginTypeNode, Healthy: true,
			RequiresTopologies: true,
			NodeInfo: &csi.NodeInfo{ID: "csi-" + node,
				AccessibleTopology: &csi.Topology{Segments: map[string]string{"zone": zone}}},
		}}})
		check(err)
	}
	rw := csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	_, err = applier.Apply(ctx, state.RegisterVolume{Volume: csi.Volume{
		ID: "db", Namespace: "default", PluginID: "zonal", ExternalID: "vol-0001",
		Capabilities: []csi.Capability{rw},
		Topologies:   []*csi.Topology{{Segments: map[string]string{"zone": "b"}}},
	}})
	check(err)

	router, err := rpcshim.NewRouter(rpcshim.RouterConfig{
		Store: store, Transport: rpcshim.NewInmemTransport(), NodeStatuses: &rpcshim.InmemNodeStatuses{},
	})
	check(err)
	srv, err := rpcshim.NewServer(rpcshim.ServerConfig{Store: store, Applier: applier, Router: router})
	check(err)

	resp, err := srv.Feasibility(ctx, &rpcshim.FeasibilityRequest{
		Namespace: "default", VolumeID: "db",
		Claim: csi.PlacementRequest{Namespace: "default", Mode: csi.ClaimWrite, Capability: rw},
	})
	check(err)
	fmt.Println("volume in", csi.TopologiesString(resp.VolumeTopologies))
	for _, n := range resp.Nodes {
		fmt.Printf("%s {%s}: %s\n", n.NodeID, n.Topology, n.Reasons)
	}
	fmt.Println("feasible:", resp.Feasible())
	// Output:
	// volume in {zone=b}
	// n1 {zone=a}: topology
	// n2 {zone=a}: topology
	// n3 {zone=b}: feasible
	// feasible: [n3]
}
