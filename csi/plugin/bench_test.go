package plugin_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
)

// BenchmarkNodePublish compares NodePublishVolume through the csikit
// client with the same call through the raw generated csipb.NodeClient,
// against one fake plugin socket. The two sides alternate in chunks so
// that drift in the machine's load hits both. Reported: client-ns/op,
// raw-ns/op and their ratio client-vs-raw.
func BenchmarkNodePublish(b *testing.B) {
	p := csitest.Start(b, csitest.Config{})
	p.AddVolume("vol-1", 1<<30, map[string]string{"k": "v"})
	target := filepath.Join(shortDir(b), "target")
	ctx := context.Background()

	c := newClient(b, p.Addr(), nil) // null logger: trace off
	req := &plugin.NodePublishRequest{
		ExternalID:     "vol-1",
		TargetPath:     target,
		Capability:     csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem},
		MountOptions:   &csi.MountOptions{FSType: "ext4", MountFlags: []string{"noatime"}},
		Secrets:        csi.Secrets{"token": "t"},
		PublishContext: map[string]string{"devicePath": "/dev/x"},
		VolumeContext:  map[string]string{"k": "v"},
	}

	conn, err := grpc.NewClient(p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	raw := csipb.NewNodeClient(conn)
	rawReq := &csipb.NodePublishVolumeRequest{
		VolumeId:   "vol-1",
		TargetPath: target,
		VolumeCapability: &csipb.VolumeCapability{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "ext4", MountFlags: []string{"noatime"}}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		},
		Secrets:        map[string]string{"token": "t"},
		PublishContext: map[string]string{"devicePath": "/dev/x"},
		VolumeContext:  map[string]string{"k": "v"},
	}

	// Warm up both connections; the first publish creates the target,
	// later ones are the plugin's idempotent fast path.
	if err := c.NodePublishVolume(ctx, req); err != nil {
		b.Fatal(err)
	}
	if _, err := raw.NodePublishVolume(ctx, rawReq); err != nil {
		b.Fatal(err)
	}
	p.ResetCalls()

	runClient := func(n int) time.Duration {
		start := time.Now()
		for range n {
			if err := c.NodePublishVolume(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	runRaw := func(n int) time.Duration {
		start := time.Now()
		for range n {
			if _, err := raw.NodePublishVolume(ctx, rawReq); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}

	// Small chunks, and the side that goes first alternates, so load
	// changes and ordering effects fall on both sides alike.
	const chunk = 20
	var clientTime, rawTime time.Duration
	b.ResetTimer()
	for done, i := 0, 0; done < b.N; i++ {
		n := min(chunk, b.N-done)
		if i%2 == 0 {
			clientTime += runClient(n)
			rawTime += runRaw(n)
		} else {
			rawTime += runRaw(n)
			clientTime += runClient(n)
		}
		done += n
	}
	b.StopTimer()

	clientNs := float64(clientTime.Nanoseconds()) / float64(b.N)
	rawNs := float64(rawTime.Nanoseconds()) / float64(b.N)
	b.ReportMetric(clientNs, "client-ns/op")
	b.ReportMetric(rawNs, "raw-ns/op")
	b.ReportMetric(clientNs/rawNs, "client-vs-raw")
}
