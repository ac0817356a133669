package demo_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/demo"
	"github.com/csikit/csikit/rpcshim"
)

// BenchmarkCluster_ClaimMountRelease measures one allocation's whole
// volume lifecycle through every real part: HTTP API, claim,
// ControllerPublish routed to node-1 over gRPC, NodeStage and
// NodePublish on node-2 by the hostpath plugin (symbolic links, so the
// figure does not depend on privileges), then release: the claim
// worker's NodeUnpublish, NodeUnstage, ControllerUnpublish and free,
// waited for with blocking queries. It reports milliseconds per
// lifecycle.
func BenchmarkCluster_ClaimMountRelease(b *testing.B) {
	dir, err := os.MkdirTemp("", "rsb")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	c, err := demo.StartCluster(ctx, demo.ClusterConfig{Dir: dir, Mount: hostpath.MountSymlink})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := c.Close(cctx); err != nil {
			b.Error(err)
		}
	}()
	client := c.Client()
	_, err = client.CreateVolume(ctx, &rpcshim.VolumeCreateRequest{Volume: csi.Volume{
		ID: "bench", Namespace: "default", PluginID: demo.PluginID,
		Capabilities: []csi.Capability{{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}},
	}})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		alloc := fmt.Sprintf("bench-%d", i)
		if _, err := client.Claim(ctx, "default", "bench", &api.ClaimRequest{AllocationID: alloc, NodeID: "node-2", Mode: csi.ClaimWrite, Mount: true}); err != nil {
			b.Fatal(err)
		}
		if _, err := client.Release(ctx, alloc); err != nil {
			b.Fatal(err)
		}
		if err := client.WaitReleased(ctx, alloc); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/lifecycle")
}
