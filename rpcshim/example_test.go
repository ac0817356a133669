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

// localPlugins is a node agent's plugin lookup with one plugin. A real
// agent passes its fingerprint.Manager, which serves both lookups.
type localPlugins struct {
	id     string
	client *plugin.Client
}

func (l *localPlugins) ControllerPlugin(id string) (plugin.ControllerClient, *csi.PluginInfo, error) {
	if id != l.id {
		return nil, nil, fmt.Errorf("%w: no plugin %s here", csi.ErrPluginNotFound, id)
	}
	return l.client, nil, nil
}

func (l *localPlugins) NodePlugin(id string) (plugin.NodeClient, *csi.PluginInfo, error) {
	if id != l.id {
		return nil, nil, fmt.Errorf("%w: no plugin %s here", csi.ErrPluginNotFound, id)
	}
	return l.client, nil, nil
}

// A single-process host with one node: the server side (store, applier,
// node statuses, transport → Router → Server) and the node side (plugins
// and mounter → NodeEndpoint on the transport), then a volume's life:
// register, claim (ControllerPublish on the node's controller), mount,
// and the release steps the claim release worker runs through the
// router.
func Example() {
	ctx := context.Background()
	check := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}

	// The node's plugin: a fake that attaches through ControllerPublish
	// and stages before it publishes.
	p, err := csitest.New(csitest.Config{
		Name: "hostpath.example.io", NodeID: "csi-node-1",
		Controller: csi.ControllerCapabilities{PublishUnpublishVolume: true},
		Node:       csi.NodeCapabilities{StageUnstageVolume: true},
	})
	check(err)
	check(p.Start())
	defer p.Stop()
	p.AddVolume("disk-7", 1<<30, nil)
	client, err := plugin.New(plugin.Config{Endpoint: p.Endpoint()})
	check(err)
	defer client.Close()
	plugins := &localPlugins{id: "hostpath", client: client}

	// Server side.
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

	// Node side.
	dir, err := os.MkdirTemp("", "rpcshim")
	check(err)
	defer os.RemoveAll(dir)
	mnt, err := mounter.New(mounter.Config{Root: filepath.Join(dir, "mnt"), StateDir: filepath.Join(dir, "state"), Plugins: plugins, NoSync: true})
	check(err)
	endpoint, err := rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{NodeID: "node-1", Plugins: plugins, Mounter: mnt})
	check(err)
	transport.Register("node-1", endpoint)

	// The host reports the node's fingerprint (a fingerprint.Manager
	// would) and the workload.
	apply := func(cmd state.Command) {
		_, err := applier.Apply(ctx, cmd)
		check(err)
	}
	apply(state.UpsertNodePlugins{NodeID: "node-1", Plugins: []csi.PluginInfo{{
		PluginID: "hostpath", Type: csi.PluginTypeMonolith, Healthy: true, Provider: "hostpath.example.io",
		RequiresController: true, UpdateTime: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		ControllerInfo: &csi.ControllerInfo{Capabilities: csi.ControllerCapabilities{PublishUnpublishVolume: true}},
		NodeInfo:       &csi.NodeInfo{ID: "csi-node-1", Capabilities: csi.NodeCapabilities{StageUnstageVolume: true}},
	}}})
	apply(state.UpsertAllocations{Allocations: []csi.Allocation{{ID: "web-1", Namespace: "default", NodeID: "node-1"}}})

	// Register and claim.
	capab := csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	_, err = server.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
		ID: "db", Namespace: "default", PluginID: "hostpath", ExternalID: "disk-7", Capabilities: []csi.Capability{capab},
	}})
	check(err)
	claim, err := server.Claim(ctx, &rpcshim.VolumeClaimRequest{Namespace: "default", VolumeID: "db", Claim: csi.Claim{
		AllocationID: "web-1", NodeID: "node-1", Mode: csi.ClaimWrite, AccessMode: capab.AccessMode, AttachmentMode: capab.AttachmentMode,
	}})
	check(err)
	fmt.Println("claimed for CSI node", claim.Claim.ExternalNodeID, "with publish context", claim.Attachment.PublishContext)

	// The node agent mounts the volume with what the claim returned.
	req, err := mounter.NewMountRequest(claim.Volume, claim.Claim)
	check(err)
	_, err = mnt.MountVolume(ctx, req)
	check(err)

	// The workload stops; the release worker's steps go through the
	// router: node detach on the claim's node, then controller detach.
	apply(state.UpsertAllocations{ReleasedAt: time.Date(2026, 3, 1, 13, 0, 0, 0, time.UTC),
		Allocations: []csi.Allocation{{ID: "web-1", Namespace: "default", NodeID: "node-1", Terminal: true}}})
	vol, err := store.Volume("default", "db")
	check(err)
	check(router.NodeDetach(ctx, vol, vol.PastClaims["web-1"]))
	check(router.ControllerDetach(ctx, vol, vol.PastClaims["web-1"]))

	fmt.Println("plugin calls:", p.Methods())
	fmt.Println("lifecycle violations:", len(p.Violations()))
	// Output:
	// claimed for CSI node csi-node-1 with publish context map[devicePath:/dev/fake-disk-7]
	// plugin calls: [ValidateVolumeCapabilities ControllerPublishVolume NodeGetCapabilities NodeStageVolume NodePublishVolume NodeUnpublishVolume NodeUnstageVolume ControllerUnpublishVolume]
	// lifecycle violations: 0
}

// With no controller to serve it, a call fails with a
// *NoControllerError (csi.ErrNoController, Retryable) that says why each
// controller node was passed over.
func ExampleNoControllerError() {
	ctx := context.Background()
	store, err := state.NewMemStore(state.Config{})
	if err != nil {
		log.Fatal(err)
	}
	applier := state.NewLocalApplier(store)
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	controller := func(healthy bool, desc string) csi.PluginInfo {
		return csi.PluginInfo{PluginID: "ebs", Type: csi.PluginTypeController, Healthy: healthy, HealthDescription: desc,
			UpdateTime: at, RequiresController: true, ControllerInfo: &csi.ControllerInfo{}}
	}
	for node, info := range map[string]csi.PluginInfo{"n1": controller(true, ""), "n2": controller(true, ""), "n3": controller(false, "probe failed")} {
		if _, err := applier.Apply(ctx, state.UpsertNodePlugins{NodeID: node, Plugins: []csi.PluginInfo{info}}); err != nil {
			log.Fatal(err)
		}
	}
	statuses := &rpcshim.InmemNodeStatuses{}
	statuses.Set("n1", csi.NodeStatusReady)
	statuses.Set("n2", csi.NodeStatusDown)
	statuses.Set("n3", csi.NodeStatusReady)
	// n1's agent answers, but the plugin no longer runs there.
	transport := rpcshim.NewInmemTransport()
	node := rpcshim.NewMux()
	rpcshim.Handle(node, rpcshim.MethodControllerPublish, func(context.Context, *rpcshim.ControllerPublishRequest) (*rpcshim.ControllerPublishResponse, error) {
		return nil, fmt.Errorf("%w: ebs is not running on n1", csi.ErrPluginNotFound)
	})
	transport.Register("n1", node)

	router, err := rpcshim.NewRouter(rpcshim.RouterConfig{Store: store, Transport: transport, NodeStatuses: statuses})
	if err != nil {
		log.Fatal(err)
	}
	req := &rpcshim.ControllerPublishRequest{CSIControllerQuery: rpcshim.CSIControllerQuery{PluginID: "ebs"}}
	req.ExternalID, req.ExternalNodeID = "vol-0abc", "i-0123"
	_, err = router.ControllerPublish(ctx, req)
	fmt.Println(err)
	fmt.Println("retry later:", csi.IsRetryable(err))
	// Output:
	// no controller available: plugin ebs has no controller that can serve ControllerPublishVolume: node n1: plugin not found on node; node n2: not ready (down); node n3: controller unhealthy: probe failed; retry once a controller of the plugin is healthy on a ready node
	// retry later: true
}
