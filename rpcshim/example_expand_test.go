package rpcshim_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// A volume mounted on one node grows: ControllerExpandVolume through the
// router, then NodeExpandVolume on the node through its endpoint and
// mounter, each step recorded in the state.
func ExampleServer_ExpandVolume() {
	ctx := context.Background()
	check := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	ctrl := csi.ControllerCapabilities{PublishUnpublishVolume: true, ExpandVolume: true}
	node := csi.NodeCapabilities{StageUnstageVolume: true, ExpandVolume: true}
	p, err := csitest.New(csitest.Config{Name: "hostpath.example.io", NodeID: "csi-node-1", Controller: ctrl, Node: node})
	check(err)
	check(p.Start())
	defer p.Stop()
	p.AddVolume("disk-7", 1<<30, nil)
	client, err := plugin.New(plugin.Config{Endpoint: p.Endpoint()})
	check(err)
	defer client.Close()
	plugins := &localPlugins{id: "hostpath", client: client}

	store, err := state.NewMemStore(state.Config{})
	check(err)
	applier := state.NewLocalApplier(store)
	statuses := &rpcshim.InmemNodeStatuses{}
	statuses.Set("node-1", csi.NodeStatusReady)
	transport := rpcshim.NewInmemTransport()
	router, err := rpcshim.NewRouter(rpcshim.RouterConfig{Store: store, Transport: transport, NodeStatuses: statuses})
	check(err)
	server, err := rpcshim.NewServer(rpcshim.ServerConfig{Store: store, Applier: applier, Router: router})
	check(err)
	dir, err := os.MkdirTemp("", "rpcshim")
	check(err)
	defer os.RemoveAll(dir)
	mnt, err := mounter.New(mounter.Config{Root: filepath.Join(dir, "mnt"), StateDir: filepath.Join(dir, "state"), Plugins: plugins, NoSync: true})
	check(err)
	defer mnt.Close()
	endpoint, err := rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{NodeID: "node-1", Plugins: plugins, Mounter: mnt})
	check(err)
	transport.Register("node-1", endpoint)

	for _, cmd := range []state.Command{
		state.UpsertNodePlugins{NodeID: "node-1", Plugins: []csi.PluginInfo{{
			PluginID: "hostpath", Type: csi.PluginTypeMonolith, Healthy: true, Provider: "hostpath.example.io",
			RequiresController: true, OnlineExpansion: true, UpdateTime: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
			ControllerInfo: &csi.ControllerInfo{Capabilities: ctrl},
			NodeInfo:       &csi.NodeInfo{ID: "csi-node-1", Capabilities: node},
		}}},
		state.UpsertAllocations{Allocations: []csi.Allocation{{ID: "web-1", Namespace: "default", NodeID: "node-1"}}},
	} {
		_, err := applier.Apply(ctx, cmd)
		check(err)
	}
	capab := csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	_, err = server.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
		ID: "db", Namespace: "default", PluginID: "hostpath", ExternalID: "disk-7", Capacity: 1 << 30, Capabilities: []csi.Capability{capab},
	}})
	check(err)
	claim, err := server.Claim(ctx, &rpcshim.VolumeClaimRequest{Namespace: "default", VolumeID: "db", Claim: csi.Claim{
		AllocationID: "web-1", NodeID: "node-1", Mode: csi.ClaimWrite, AccessMode: capab.AccessMode, AttachmentMode: capab.AttachmentMode,
	}})
	check(err)
	req, err := mounter.NewMountRequest(claim.Volume, claim.Claim)
	check(err)
	_, err = mnt.MountVolume(ctx, req)
	check(err)
	p.ResetCalls()

	resp, err := server.ExpandVolume(ctx, &rpcshim.VolumeExpandRequest{Namespace: "default", VolumeID: "db", RequiredBytes: 2 << 30})
	check(err)
	e := resp.Volume.Expansion
	fmt.Println("capacity:", resp.Volume.Capacity>>30, "GiB; expansion", e.State, "on nodes", e.DoneNodes)
	fmt.Println("plugin calls:", p.Methods())
	// Output:
	// capacity: 2 GiB; expansion done on nodes [node-1]
	// plugin calls: [ControllerExpandVolume NodeExpandVolume]
}
