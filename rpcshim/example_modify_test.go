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

// A volume's CSI mutable parameters change through ControllerModifyVolume
// on the node that runs the controller; the store records them.
func ExampleServer_ModifyVolume() {
	ctx := context.Background()
	check := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	ctrl := csi.ControllerCapabilities{ModifyVolume: true}
	p, err := csitest.New(csitest.Config{Name: "fast.example.io", Type: csi.PluginTypeController, Controller: ctrl})
	check(err)
	check(p.Start())
	defer p.Stop()
	p.AddVolume("disk-9", 1<<30, nil)
	client, err := plugin.New(plugin.Config{Endpoint: p.Endpoint()})
	check(err)
	defer client.Close()
	plugins := &localPlugins{id: "fast", client: client}

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
	_, err = applier.Apply(ctx, state.UpsertNodePlugins{NodeID: "node-1", Plugins: []csi.PluginInfo{{
		PluginID: "fast", Type: csi.PluginTypeController, Healthy: true, Provider: "fast.example.io",
		RequiresController: true, UpdateTime: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		ControllerInfo: &csi.ControllerInfo{Capabilities: ctrl},
	}}})
	check(err)
	_, err = applier.Apply(ctx, state.RegisterVolume{Volume: csi.Volume{
		ID: "db", Namespace: "default", PluginID: "fast", ExternalID: "disk-9",
		Capabilities: []csi.Capability{{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}},
	}})
	check(err)

	resp, err := server.ModifyVolume(ctx, &rpcshim.VolumeModifyRequest{Namespace: "default", VolumeID: "db", MutableParameters: map[string]string{"iops": "3000"}})
	check(err)
	fmt.Println("mutable parameters:", resp.Volume.MutableParameters, "by the controller on", resp.ControllerNodeID)
	st, _ := p.Volume("disk-9")
	fmt.Println("plugin holds:", st.MutableParameters)
	// Output:
	// mutable parameters: map[iops:3000] by the controller on node-1
	// plugin holds: map[iops:3000]
}
