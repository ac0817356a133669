package claimgc_test

import (
	"context"
	"fmt"
	"time"

	"github.com/csikit/csikit/claimgc"
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// printNodes and printController stand in for the rpcshim router, which
// would run the steps on the node and on a controller.
type printNodes struct{}

func (printNodes) NodeDetach(_ context.Context, v *csi.Volume, c *csi.Claim) error {
	fmt.Printf("node step: NodeUnpublish/NodeUnstage of %s for %s on %s\n", v.ID, c.AllocationID, c.NodeID)
	return nil
}

type printController struct{}

func (printController) ControllerDetach(_ context.Context, v *csi.Volume, c *csi.Claim) error {
	fmt.Printf("controller step: ControllerUnpublish of %s from %s\n", v.ExternalID, c.ExternalNodeID)
	return nil
}

// readyNodes reports every node ready.
type readyNodes struct{}

func (readyNodes) NodeStatus(context.Context, string) (csi.NodeStatus, error) {
	return csi.NodeStatusReady, nil
}

// Example shows a single-process host: it builds the worker on its
// store and applier, runs it, enables it (a single process is always
// the leader), and reports an allocation that stopped. The worker does
// the rest.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, _ := state.NewMemStore(state.Config{})
	applier := state.NewLocalApplier(store)
	apply := func(cmd state.Command) {
		if _, err := applier.Apply(ctx, cmd); err != nil {
			fmt.Println("apply:", err)
		}
	}

	// What the host reports before any release: the plugin's instances,
	// a volume, an allocation and its claim.
	apply(state.UpsertNodePlugins{NodeID: "node1", Plugins: []csi.PluginInfo{
		{PluginID: "ebs", Type: csi.PluginTypeMonolith, Healthy: true, RequiresController: true,
			ControllerInfo: &csi.ControllerInfo{Capabilities: csi.ControllerCapabilities{PublishUnpublishVolume: true}},
			NodeInfo:       &csi.NodeInfo{ID: "i-0abc"}},
	}})
	capab := csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	apply(state.RegisterVolume{Volume: csi.Volume{ID: "db", Namespace: "default", ExternalID: "vol-123",
		PluginID: "ebs", Capabilities: []csi.Capability{capab}}})
	apply(state.UpsertAllocations{Allocations: []csi.Allocation{{ID: "web-1", Namespace: "default", NodeID: "node1"}}})
	apply(state.ClaimVolume{Namespace: "default", VolumeID: "db", Claim: csi.Claim{
		AllocationID: "web-1", NodeID: "node1", Mode: csi.ClaimWrite,
		AccessMode: capab.AccessMode, AttachmentMode: capab.AttachmentMode}})

	// 1. Build the worker.
	w, err := claimgc.New(claimgc.Config{
		Store:        store,
		Applier:      applier,
		Nodes:        printNodes{},
		Controllers:  printController{},
		NodeStatuses: readyNodes{},
		Parallelism:  4,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// 2. Run it.
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	// 3. Enable it on the leader.
	w.SetEnabled(true)

	// 4. The allocation stops: its claim becomes a past claim.
	apply(state.UpsertAllocations{
		Allocations: []csi.Allocation{{ID: "web-1", Namespace: "default", NodeID: "node1", Terminal: true}},
		ReleasedAt:  time.Now(),
	})

	if err := w.Settle(ctx); err != nil {
		fmt.Println(err)
	}
	v, _ := store.Volume("default", "db")
	fmt.Println("claims left:", len(v.PastClaims), "freed:", w.Stats().Freed)

	cancel()
	<-done
	// Output:
	// node step: NodeUnpublish/NodeUnstage of db for web-1 on node1
	// controller step: ControllerUnpublish of vol-123 from i-0abc
	// claims left: 0 freed: 1
}
