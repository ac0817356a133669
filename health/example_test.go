package health_test

import (
	"context"
	"fmt"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/health"
	"github.com/csikit/csikit/state"
)

// A single-process host: one plugin reached through a plugin.Client,
// the store applied locally. The Monitor's pass finds the volume the
// backend marked abnormal.
func Example() {
	fake, err := csitest.New(csitest.Config{
		Controller:   csi.ControllerCapabilities{ListVolumes: true, GetVolumeHealth: true},
		VolumeStatus: csitest.StatusWithCondition,
	})
	if err != nil {
		panic(err)
	}
	if err := fake.Start(); err != nil {
		panic(err)
	}
	defer fake.Stop()
	client, err := plugin.New(plugin.Config{Endpoint: fake.Endpoint()})
	if err != nil {
		panic(err)
	}
	defer client.Close()

	ctx := context.Background()
	store, _ := state.NewMemStore(state.Config{})
	applier := state.NewLocalApplier(store)
	mustApply := func(cmd state.Command) {
		if _, err := applier.Apply(ctx, cmd); err != nil {
			panic(err)
		}
	}
	mustApply(state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{{
		PluginID: "fake", Type: csi.PluginTypeController, Healthy: true, RequiresController: true,
		ControllerInfo: &csi.ControllerInfo{Capabilities: csi.ControllerCapabilities{ListVolumes: true, GetVolumeHealth: true}},
	}}})
	fake.AddVolume("vol-1", 1<<30, nil)
	mustApply(state.RegisterVolume{Volume: csi.Volume{ID: "data", Namespace: "default", ExternalID: "vol-1", PluginID: "fake",
		Capabilities: []csi.Capability{{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}}}})
	fake.SetVolumeCondition("vol-1", true, "replica lost")

	m, err := health.New(health.Config{
		Store: store, Applier: applier,
		Controllers: health.ControllerFuncs{
			List: func(ctx context.Context, _ string, r *plugin.ListVolumesRequest) (*plugin.ListVolumesResponse, error) {
				return client.ListVolumes(ctx, r)
			},
		},
		Observer: health.ObserverFunc(func(e health.Event) { fmt.Println(e.Kind, e.Namespace+"/"+e.VolumeID, e.Reason) }),
	})
	if err != nil {
		panic(err)
	}
	// A host runs m.Run(ctx) on its leader; one pass shows the result.
	if err := m.Pass(ctx); err != nil {
		panic(err)
	}
	h, _ := store.Health("default", "data")
	fmt.Println("abnormal:", h.Abnormal())
	// Output:
	// abnormal default/data replica lost
	// abnormal: true
}
