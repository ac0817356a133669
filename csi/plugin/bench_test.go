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
// against one fake plugin socket. The sides alternate in small chunks so
// that drift in the machine's load hits all of them. Reported:
//
//   - client-ns/op and raw-ns/op, and their ratio client-vs-raw: the
//     client against a bare raw call;
//   - raw-deadline-ns/op and client-vs-raw-deadline: the raw call given
//     the same per-call deadline (DefaultCallTimeout) and WaitForReady as
//     the client, so the ratio isolates the client's own code
//     (validation, conversion, error mapping) from the cost of having a
//     deadline at all, which grpc sends to the plugin.
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
	runRawDeadline := func(n int) time.Duration {
		start := time.Now()
		for range n {
			dctx, cancel := context.WithTimeout(ctx, plugin.DefaultCallTimeout)
			_, err := raw.NodePublishVolume(dctx, rawReq, grpc.WaitForReady(true))
			cancel()
			if err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}

	// Small chunks, and the side that goes first alternates, so load
	// changes and ordering effects fall on both sides alike.
	const chunk = 20
	var clientTime, rawTime, rawDeadlineTime time.Duration
	b.ResetTimer()
	for done, i := 0, 0; done < b.N; i++ {
		n := min(chunk, b.N-done)
		switch i % 3 {
		case 0:
			clientTime += runClient(n)
			rawTime += runRaw(n)
			rawDeadlineTime += runRawDeadline(n)
		case 1:
			rawTime += runRaw(n)
			rawDeadlineTime += runRawDeadline(n)
			clientTime += runClient(n)
		default:
			rawDeadlineTime += runRawDeadline(n)
			clientTime += runClient(n)
			rawTime += runRaw(n)
		}
		done += n
		// The fake's call log grows with every call; keep it (and the GC
		// work it causes, which a real plugin does in its own process)
		// out of the figures.
		p.ResetCalls()
	}
	b.StopTimer()

	clientNs := float64(clientTime.Nanoseconds()) / float64(b.N)
	rawNs := float64(rawTime.Nanoseconds()) / float64(b.N)
	b.ReportMetric(clientNs, "client-ns/op")
	b.ReportMetric(rawNs, "raw-ns/op")
	b.ReportMetric(clientNs/rawNs, "client-vs-raw")
	rawDeadlineNs := float64(rawDeadlineTime.Nanoseconds()) / float64(b.N)
	b.ReportMetric(rawDeadlineNs, "raw-deadline-ns/op")
	b.ReportMetric(clientNs/rawDeadlineNs, "client-vs-raw-deadline")
}
