package rpcshim_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// Snapshot a volume, restore the snapshot into a new volume, and delete
// the snapshot: each one call on the Server, with the intent written
// before the plugin is called.
func ExampleServer_CreateSnapshot() {
	ctx := context.Background()
	check := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	caps := csi.ControllerCapabilities{CreateDeleteVolume: true, CreateDeleteSnapshot: true}
	p, err := csitest.New(csitest.Config{Type: csi.PluginTypeController, Controller: caps})
	check(err)
	check(p.Start())
	defer p.Stop()
	p.AddVolume("disk-7", 1<<30, nil)
	client, err := plugin.New(plugin.Config{Endpoint: p.Endpoint()})
	check(err)
	defer client.Close()

	store, err := state.NewMemStore(state.Config{})
	check(err)
	applier := state.NewLocalApplier(store)
	statuses := &rpcshim.InmemNodeStatuses{}
	statuses.Set("node-1", csi.NodeStatusReady)
	transport := rpcshim.NewInmemTransport()
	endpoint, err := rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{NodeID: "node-1", Plugins: &localPlugins{id: "disks", client: client},
		Mounter: &epUnmounter{}}) // a controller-only node mounts nothing
	check(err)
	transport.Register("node-1", endpoint)
	router, err := rpcshim.NewRouter(rpcshim.RouterConfig{Store: store, Transport: transport, NodeStatuses: statuses})
	check(err)
	server, err := rpcshim.NewServer(rpcshim.ServerConfig{Store: store, Applier: applier, Router: router})
	check(err)
	_, err = applier.Apply(ctx, state.UpsertNodePlugins{NodeID: "node-1", Plugins: []csi.PluginInfo{{
		PluginID: "disks", Type: csi.PluginTypeController, Healthy: true, RequiresController: true,
		UpdateTime: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), ControllerInfo: &csi.ControllerInfo{Capabilities: caps},
	}}})
	check(err)
	capab := csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	_, err = server.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
		ID: "db", Namespace: "default", PluginID: "disks", ExternalID: "disk-7", Capabilities: []csi.Capability{capab},
	}})
	check(err)

	snap, err := server.CreateSnapshot(ctx, &rpcshim.SnapshotCreateRequest{Namespace: "default", VolumeID: "db", SnapshotID: "nightly"})
	check(err)
	fmt.Println("snapshot", snap.Snapshot.ID, "ready:", snap.Snapshot.ReadyToUse, "size:", snap.Snapshot.Size)

	restored, err := server.CreateVolume(ctx, &rpcshim.VolumeCreateRequest{
		From:   &rpcshim.VolumeSource{SnapshotID: "nightly"},
		Volume: csi.Volume{ID: "db-copy", Namespace: "default", PluginID: "disks", Capabilities: []csi.Capability{capab}},
	})
	check(err)
	fmt.Println("restored", restored.Volume.ID, "capacity:", restored.Volume.Capacity)

	_, err = server.DeleteSnapshot(ctx, &rpcshim.SnapshotDeleteRequest{Namespace: "default", SnapshotID: "nightly"})
	check(err)
	left, err := server.ListSnapshots(ctx, "default", "")
	check(err)
	fmt.Println("snapshots left:", len(left))
	// Output:
	// snapshot nightly ready: true size: 1073741824
	// restored db-copy capacity: 1073741824
	// snapshots left: 0
}
