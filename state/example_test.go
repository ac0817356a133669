package state_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// A single-process host: fingerprint a plugin, register a volume, report
// an allocation and claim the volume for it.
func Example() {
	ctx := context.Background()
	store, err := state.NewMemStore(state.Config{})
	if err != nil {
		panic(err)
	}
	applier := state.NewLocalApplier(store)
	apply := func(cmd state.Command) state.Result {
		res, err := applier.Apply(ctx, cmd)
		if err != nil {
			panic(err)
		}
		return res
	}
	stopped := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

	// The host reports allocations: the plugin's and the workloads'.
	apply(state.UpsertAllocations{Allocations: []csi.Allocation{
		{ID: "hostpath-1", Namespace: "default", NodeID: "node-1", JobID: "hostpath",
			Plugins: []csi.AllocPlugin{{PluginID: "hostpath", Type: csi.PluginTypeMonolith}}},
		{ID: "web-1", Namespace: "default", NodeID: "node-1", JobID: "web"},
		{ID: "web-2", Namespace: "default", NodeID: "node-1", JobID: "web"},
	}})
	// The node reports its plugin fingerprint; a healthy one creates the plugin.
	apply(state.UpsertNodePlugins{NodeID: "node-1", Plugins: []csi.PluginInfo{{
		PluginID: "hostpath", AllocationID: "hostpath-1", Type: csi.PluginTypeMonolith,
		Healthy: true, UpdateTime: stopped.Add(-time.Hour), Provider: "hostpath.csi.example.com",
		ControllerInfo: &csi.ControllerInfo{},
		NodeInfo:       &csi.NodeInfo{ID: "csi-node-1"},
	}}})
	apply(state.RegisterVolume{Volume: csi.Volume{
		ID: "db", Namespace: "default", ExternalID: "pv-42", PluginID: "hostpath",
		Capabilities: []csi.Capability{{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}},
	}})

	claim := csi.Claim{AllocationID: "web-1", NodeID: "node-1", Mode: csi.ClaimWrite,
		AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	res := apply(state.ClaimVolume{Namespace: "default", VolumeID: "db", Claim: claim})
	fmt.Println("claimed at index", res.Index, "for CSI node", res.Claim.ExternalNodeID)

	claim.AllocationID = "web-2"
	_, err = applier.Apply(ctx, state.ClaimVolume{Namespace: "default", VolumeID: "db", Claim: claim})
	fmt.Println("second writer refused:", errors.Is(err, csi.ErrMaxClaims))

	// web-1 stops: its claim becomes a past claim for the release worker.
	apply(state.UpsertAllocations{Allocations: []csi.Allocation{
		{ID: "web-1", Namespace: "default", NodeID: "node-1", JobID: "web", Terminal: true},
	}, ReleasedAt: stopped})
	v, err := store.Volume("default", "db")
	if err != nil {
		panic(err)
	}
	fmt.Println(v.Provider, "schedulable:", v.Schedulable, "past claim:", v.PastClaims["web-1"].State)
	// Output:
	// claimed at index 4 for CSI node csi-node-1
	// second writer refused: true
	// hostpath.csi.example.com schedulable: true past claim: unpublishing
}

func ExampleEncodeCommand() {
	b, err := state.EncodeCommand(state.CheckpointClaim{
		Namespace: "default", VolumeID: "db", AllocationID: "web-1", State: csi.ClaimNodeDetached,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(b))
	cmd, err := state.DecodeCommand(b)
	fmt.Printf("%T %v\n", cmd, err)
	// Output:
	// {"kind":"checkpoint-claim","body":{"Namespace":"default","VolumeID":"db","AllocationID":"web-1","State":"node-detached"}}
	// state.CheckpointClaim <nil>
}

// A blocking query: read the index, read the data, wait for the index to
// move.
func ExampleMemStore_Wait() {
	store, err := state.NewMemStore(state.Config{})
	if err != nil {
		panic(err)
	}
	idx, _ := store.Index(state.TableAllocations)
	done := make(chan uint64)
	go func() {
		next, err := store.Wait(context.Background(), state.TableAllocations, idx)
		if err != nil {
			panic(err)
		}
		done <- next
	}()
	if _, err := store.Apply(7, state.UpsertAllocations{Allocations: []csi.Allocation{
		{ID: "web-1", Namespace: "default", NodeID: "node-1"},
	}}); err != nil {
		panic(err)
	}
	fmt.Println("woke at index", <-done)
	// Output:
	// woke at index 7
}
