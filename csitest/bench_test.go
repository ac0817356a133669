package csitest_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
)

type rawIdentity struct {
	csipb.UnimplementedIdentityServer
}

func (rawIdentity) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return &csipb.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

// BenchmarkPlugin_Probe compares a Probe round trip through the fake
// (interceptor, secret stripping, call log) with one to a bare gRPC
// Identity server on another unix socket. MaxCalls keeps the log from
// dominating memory in long runs.
func BenchmarkPlugin_Probe(b *testing.B) {
	_, c := start(b, csitest.Config{MaxCalls: 1000})
	dir, err := os.MkdirTemp("", "csi")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	lis, err := net.Listen("unix", filepath.Join(dir, "raw.sock"))
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	csipb.RegisterIdentityServer(srv, rawIdentity{})
	go func() { _ = srv.Serve(lis) }()
	b.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	raw := csipb.NewIdentityClient(conn)
	ctx := context.Background()

	var fakeTime, rawTime time.Duration
	n := 0
	for b.Loop() {
		t0 := time.Now()
		if _, err := c.id.Probe(ctx, &csipb.ProbeRequest{}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := raw.Probe(ctx, &csipb.ProbeRequest{}); err != nil {
			b.Fatal(err)
		}
		rawTime += time.Since(t1)
		fakeTime += t1.Sub(t0)
		n++
	}
	b.ReportMetric(float64(fakeTime.Nanoseconds())/float64(n), "fake-ns/call")
	b.ReportMetric(float64(rawTime.Nanoseconds())/float64(n), "raw-ns/call")
	b.ReportMetric(float64(fakeTime)/float64(rawTime), "x-raw-grpc")
}

// BenchmarkPlugin_PublishCycle measures a NodePublishVolume and
// NodeUnpublishVolume pair, file system work included.
func BenchmarkPlugin_PublishCycle(b *testing.B) {
	p, c := start(b, csitest.Config{Type: csi.PluginTypeNode, MaxCalls: 1000})
	p.AddVolume("v", 1, nil)
	target := filepath.Join(b.TempDir(), "t")
	ctx := context.Background()
	n := 0
	start := time.Now()
	for b.Loop() {
		if _, err := c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target, VolumeCapability: mountCap(snw)}); err != nil {
			b.Fatal(err)
		}
		if _, err := c.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: target}); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(n), "ns/cycle")
}
