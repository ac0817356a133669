package mounter_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/mounter"
)

// BenchmarkMounter_MountVsRaw times one MountVolume + UnmountVolume
// through the Mounter (stage, publish, unpublish, unstage, with the
// tracker persisted) against the same four node RPCs sent with the raw
// generated csipb.NodeClient, on the same fake-plugin socket, alternating
// the two in one run so that both see the same machine state.
//
// Metrics:
//   - mount-vs-raw: mounter time / raw time.
//   - syncs/call: synced commits of the state database per plugin call
//     (bbolt makes two fdatasyncs per commit).
//   - syncs/lifecycle: synced commits per mount + unmount of one
//     allocation on one node.
//
// The "sync" case is the default configuration; "nosync" (Config.NoSync)
// shows what the persistence costs.
func BenchmarkMounter_MountVsRaw(b *testing.B) {
	for _, tc := range []struct {
		name   string
		noSync bool
	}{
		{"sync", false},
		{"nosync", true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e := newEnv(b, stageCaps)
			e.reg.info = &csi.PluginInfo{PluginID: testPlugin, Type: csi.PluginTypeNode,
				NodeInfo: &csi.NodeInfo{ID: "n1", Capabilities: stageCaps}}
			e.volume("bench")
			rawExt := e.volume("raw")
			m, err := mounter.New(mounter.Config{Root: e.root, StateDir: e.state, Plugins: e.reg, NoSync: tc.noSync})
			if err != nil {
				b.Fatal(err)
			}

			conn, err := grpc.NewClient(e.p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			raw := csipb.NewNodeClient(conn)
			rawStaging := filepath.Join(e.root, "raw", "staging")
			rawTarget := filepath.Join(e.root, "raw", "target", "t")
			for _, d := range []string{rawStaging, filepath.Dir(rawTarget)} {
				if err := os.MkdirAll(d, 0o750); err != nil {
					b.Fatal(err)
				}
			}
			vc := &csipb.VolumeCapability{
				AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
				AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER},
			}
			ctx := context.Background()
			rawCycle := func() {
				if _, err := raw.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: rawExt, StagingTargetPath: rawStaging, VolumeCapability: vc}); err != nil {
					b.Fatal(err)
				}
				if _, err := raw.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: rawExt, StagingTargetPath: rawStaging,
					TargetPath: rawTarget, VolumeCapability: vc}); err != nil {
					b.Fatal(err)
				}
				if _, err := raw.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: rawExt, TargetPath: rawTarget}); err != nil {
					b.Fatal(err)
				}
				if _, err := raw.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: rawExt, StagingTargetPath: rawStaging}); err != nil {
					b.Fatal(err)
				}
			}
			mountCycle := func() {
				if _, err := m.MountVolume(ctx, mountReq("bench", "alloc")); err != nil {
					b.Fatal(err)
				}
				if err := m.UnmountVolume(ctx, unmountReq("bench", "alloc")); err != nil {
					b.Fatal(err)
				}
			}
			// Warm both paths (connections, directories) before timing.
			rawCycle()
			mountCycle()

			var mounterTime, rawTime time.Duration
			s0 := m.Stats()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if i%512 == 0 {
					b.StopTimer()
					e.p.ResetCalls() // keep the fake's call log small
					b.StartTimer()
				}
				// Alternate which goes first.
				if i%2 == 0 {
					t0 := time.Now()
					mountCycle()
					t1 := time.Now()
					rawCycle()
					mounterTime += t1.Sub(t0)
					rawTime += time.Since(t1)
				} else {
					t0 := time.Now()
					rawCycle()
					t1 := time.Now()
					mountCycle()
					rawTime += t1.Sub(t0)
					mounterTime += time.Since(t1)
				}
			}
			b.StopTimer()
			s1 := m.Stats()
			calls := float64(s1.PluginCalls - s0.PluginCalls)
			b.ReportMetric(float64(mounterTime)/float64(rawTime), "mount-vs-raw")
			b.ReportMetric(float64(mounterTime.Nanoseconds())/float64(b.N), "mounter-ns/cycle")
			b.ReportMetric(float64(rawTime.Nanoseconds())/float64(b.N), "raw-ns/cycle")
			b.ReportMetric(float64(s1.Syncs-s0.Syncs)/calls, "syncs/call")
			// One lifecycle is one mountCycle: claim-side mount and
			// unmount of one allocation on one node.
			b.ReportMetric(float64(s1.Syncs-s0.Syncs)/float64(b.N), "syncs/lifecycle")
			e.p.RequireNoViolations(b)
		})
	}
}

// BenchmarkMounter_ParallelVolumes mounts and unmounts 64 volumes at
// once, one allocation each, with syncing on: the writes of volumes
// that overlap share commits (bbolt's Batch). syncs/lifecycle is the
// synced commits per mount + unmount; a lone volume makes 2.
func BenchmarkMounter_ParallelVolumes(b *testing.B) {
	const n = 64
	e := newEnv(b, stageCaps)
	e.reg.info = &csi.PluginInfo{PluginID: testPlugin, Type: csi.PluginTypeNode,
		NodeInfo: &csi.NodeInfo{ID: "n1", Capabilities: stageCaps}}
	for i := range n {
		e.volume(fmt.Sprintf("v%d", i))
	}
	m, err := mounter.New(mounter.Config{Root: e.root, StateDir: e.state, Plugins: e.reg, MaxParallel: n})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close() })
	s0 := m.Stats()
	for b.Loop() {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				vol := fmt.Sprintf("v%d", i)
				if _, err := m.MountVolume(context.Background(), mountReq(vol, "a")); err != nil {
					b.Error(err)
					return
				}
				if err := m.UnmountVolume(context.Background(), unmountReq(vol, "a")); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		e.p.ResetCalls()
	}
	b.ReportMetric(float64(m.Stats().Syncs-s0.Syncs)/float64(n*b.N), "syncs/lifecycle")
}
