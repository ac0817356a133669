package hostpath_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
)

// BenchmarkPlugin_CreateDeleteVolume measures one CreateVolume plus one
// DeleteVolume over the unix socket; each writes the state file with an
// fsync, which dominates.
func BenchmarkPlugin_CreateDeleteVolume(b *testing.B) {
	h := start(b, hostpath.Config{})
	ctx := context.Background()
	i := 0
	for b.Loop() {
		i++
		cv, err := h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{
			Name: fmt.Sprintf("v%d", i), VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)},
		})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := h.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: cv.GetVolume().GetVolumeId()}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/volume")
}

// BenchmarkPlugin_NodePublishUnpublish measures one NodePublishVolume
// plus one NodeUnpublishVolume with each mount method that works here.
func BenchmarkPlugin_NodePublishUnpublish(b *testing.B) {
	for _, m := range mountMethods() {
		b.Run(string(m), func(b *testing.B) {
			h := start(b, hostpath.Config{Mount: m})
			ctx := context.Background()
			cv, err := h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "bench", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}})
			if err != nil {
				b.Fatal(err)
			}
			id := cv.GetVolume().GetVolumeId()
			target := filepath.Join(b.TempDir(), "target")
			for b.Loop() {
				if _, err := h.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, TargetPath: target, VolumeCapability: mountCap(snw)}); err != nil {
					b.Fatal(err)
				}
				if _, err := h.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/publish")
		})
	}
}
