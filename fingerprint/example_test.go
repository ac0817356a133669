package fingerprint_test

import (
	"context"
	"fmt"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/fingerprint"
)

// The host loop: a Manager reporting the node's plugins, one plugin
// allocation starting and stopping, and a lookup by the mounter.
func Example() {
	// A fake node plugin stands in for the plugin task's socket.
	p, err := csitest.New(csitest.Config{Type: csi.PluginTypeNode, Name: "hostpath.example.io", Version: "1.2.0"})
	if err != nil {
		panic(err)
	}
	if err := p.Start(); err != nil {
		panic(err)
	}
	defer p.Stop()

	// 1. Construct. The host forwards each report to its server; here it
	//    hands them to this goroutine.
	reports := make(chan []*csi.PluginInfo, 10)
	m, err := fingerprint.New(fingerprint.Config{
		NodeID: "node-1",
		Report: func(_ context.Context, infos []*csi.PluginInfo) error {
			reports <- infos
			return nil
		},
	})
	if err != nil {
		panic(err)
	}

	// 2. Run.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()

	// 3. A plugin allocation started.
	err = m.Register(fingerprint.Instance{
		PluginID:     "hostpath",
		AllocationID: "alloc-1",
		Type:         csi.PluginTypeNode,
		Socket:       p.Endpoint(),
	})
	if err != nil {
		panic(err)
	}
	for _, info := range <-reports {
		fmt.Printf("report: %s %s %s healthy=%v\n", info.PluginID, info.Provider, info.ProviderVersion, info.Healthy)
	}

	// 6. The mounter looks the node plugin up.
	client, info, err := m.NodePlugin("hostpath")
	if err != nil {
		panic(err)
	}
	ni, err := client.NodeGetInfo(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("lookup: allocation %s, CSI node %s\n", info.AllocationID, ni.ID)

	// 4. The allocation stopped.
	if err := m.Deregister("hostpath", "alloc-1"); err != nil {
		panic(err)
	}
	for _, info := range <-reports {
		fmt.Printf("report: %s healthy=%v (%s)\n", info.PluginID, info.Healthy, info.HealthDescription)
	}
	fmt.Printf("report: %d plugins\n", len(<-reports))

	_, _, err = m.NodePlugin("hostpath")
	fmt.Println("lookup:", err)

	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// report: hostpath hostpath.example.io 1.2.0 healthy=true
	// lookup: allocation alloc-1, CSI node csitest-node
	// report: hostpath healthy=false (plugin deregistered: allocation alloc-1 stopped)
	// report: 0 plugins
	// lookup: plugin not found: no node plugin "hostpath" is registered on node "node-1"; its allocation may not have started yet, retry later
}
