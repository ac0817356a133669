package capacity_test

import (
	"context"
	"fmt"
	"time"

	"github.com/csikit/csikit/capacity"
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/state"
)

// A host about to create a 4 GiB gp3 volume checks the plugin's
// capacity records (state's Capacity read) and keeps the candidate
// nodes whose zone has room.
func ExampleRoom() {
	zone := func(z string) *csi.Topology { return &csi.Topology{Segments: map[string]string{"zone": z}} }
	gp3 := state.ClassOf(map[string]string{"type": "gp3"})
	maxSize := int64(16 << 30)
	records := []state.Capacity{
		{Topology: zone("a"), Class: gp3, Available: 10 << 30, MaximumVolumeSize: &maxSize},
		{Topology: zone("b"), Class: gp3, Available: 1 << 30},
		{Topology: zone("c"), Class: state.ClassOf(map[string]string{"type": "io2"}), Available: 100 << 30},
	}
	room := capacity.NewRoom(records, gp3, 4<<30, 0)
	for _, n := range []struct {
		node string
		topo *csi.Topology
	}{{"n1", zone("a")}, {"n2", zone("b")}, {"n3", zone("c")}} {
		f := room.Node(n.topo)
		fmt.Printf("%s {%s}: %s, fits %v\n", n.node, n.topo, f, f.Fits())
	}
	fmt.Println("requisite:", csi.TopologiesString(room.WithRoom()))
	// Output:
	// n1 {zone=a}: room, fits true
	// n2 {zone=b}: no-room, fits false
	// n3 {zone=c}: unknown, fits true
	// requisite: {zone=a}
}

// A single-node host wires the Refresher to its store and to a
// plugin.Client per controller plugin; a clustered host passes a
// ControllerFunc over its router instead.
func ExampleNew() {
	store, _ := state.NewMemStore(state.Config{})
	clients := map[string]*plugin.Client{} // one per controller plugin, from the host's plugin registry
	r, err := capacity.New(capacity.Config{
		Store:   store,
		Applier: state.NewLocalApplier(store),
		Controllers: capacity.ControllerFunc(func(ctx context.Context, pluginID string, req *plugin.GetCapacityRequest) (*plugin.GetCapacityResponse, error) {
			c := clients[pluginID]
			if c == nil {
				return nil, fmt.Errorf("%w: plugin %s has no controller client here", csi.ErrNoController, pluginID)
			}
			return c.GetCapacity(ctx, req)
		}),
		Classes:  []map[string]string{{"type": "gp3"}, {"type": "io2"}},
		Interval: 5 * time.Minute,
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go r.Run(ctx) // on the leader, for as long as it leads
	// ... after each CreateVolume or DeleteVolume of plugin "ebs":
	r.Refresh("ebs")
	cancel()
}
