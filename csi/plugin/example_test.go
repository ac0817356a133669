package plugin_test

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
)

// Connect to a plugin's socket and ask for its name.
func Example() {
	p, err := csitest.New(csitest.Config{Name: "example.csikit.io"})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := p.Start(); err != nil {
		fmt.Println(err)
		return
	}
	defer p.Stop()

	c, err := plugin.New(plugin.Config{Endpoint: p.Addr()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	info, err := c.GetPluginInfo(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(info.Name)
	// Output: example.csikit.io
}

// A malformed request is refused before any RPC, with an error that
// names the field and what to do.
func ExampleClient_NodePublishVolume_invalid() {
	c, err := plugin.New(plugin.Config{Endpoint: "/run/csi/never-dialled.sock"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	err = c.NodePublishVolume(context.Background(), &plugin.NodePublishRequest{
		ExternalID: "vol-1",
		TargetPath: "alloc/data",
		Capability: csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem},
		Secrets:    csi.Secrets{"key": "never printed"},
	})
	fmt.Println(err)
	fmt.Println(errors.Is(err, csi.ErrInvalidRequest), csi.Classify(err))
	// Output:
	// invalid NodePublishVolume request: TargetPath "alloc/data" is relative; pass an absolute path
	// true final
}

// A teardown call that finds nothing to undo returns NotFound, which
// csi.TeardownDone reads as done.
func ExampleClient_NodeUnpublishVolume_notFound() {
	p, err := csitest.New(csitest.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := p.Start(); err != nil {
		fmt.Println(err)
		return
	}
	defer p.Stop()
	p.FailNext(csitest.MethodNodeUnpublishVolume, codes.NotFound, 1)

	c, err := plugin.New(plugin.Config{Endpoint: p.Endpoint()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	err = c.NodeUnpublishVolume(context.Background(), &plugin.NodeUnpublishRequest{ExternalID: "vol-1", TargetPath: "/alloc/data"})
	var re *csi.RPCError
	if errors.As(err, &re) {
		fmt.Println(re.Method, re.Code, csi.Classify(err))
	}
	fmt.Println("done:", csi.TeardownDone(err))
	// Output:
	// NodeUnpublishVolume NotFound final
	// done: true
}

// A scheduler asks a zonal plugin how much it can still provision in
// each zone. A bound the plugin does not report is nil, not 0.
func ExampleClient_GetCapacity() {
	const gib = 1 << 30
	p, err := csitest.New(csitest.Config{
		Controller:         csi.ControllerCapabilities{CreateDeleteVolume: true, GetCapacity: true},
		RequiresTopologies: true,
		Pools: []csitest.Pool{
			{Topology: &csi.Topology{Segments: map[string]string{"zone": "a"}}, Capacity: 10 * gib, MaxVolumeSize: new(int64(4 * gib))},
			{Topology: &csi.Topology{Segments: map[string]string{"zone": "b"}}},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := p.Start(); err != nil {
		fmt.Println(err)
		return
	}
	defer p.Stop()

	c, err := plugin.New(plugin.Config{Endpoint: p.Endpoint()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	for _, z := range []string{"a", "b"} {
		r, err := c.GetCapacity(context.Background(), &plugin.GetCapacityRequest{
			Topology: &csi.Topology{Segments: map[string]string{"zone": z}},
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		largest := "not reported"
		if r.MaximumVolumeSize != nil {
			largest = fmt.Sprintf("%d GiB", *r.MaximumVolumeSize/gib)
		}
		fmt.Printf("zone %s: %d GiB free, largest volume %s\n", z, r.Available/gib, largest)
	}
	// Output:
	// zone a: 10 GiB free, largest volume 4 GiB
	// zone b: 0 GiB free, largest volume not reported
}
