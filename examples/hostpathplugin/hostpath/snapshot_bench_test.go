package hostpath_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// noUnmount is the node endpoint's mounter: the benchmark mounts nothing.
type noUnmount struct{}

func (noUnmount) UnmountVolume(context.Context, *mounter.UnmountRequest) error { return nil }

// snapshotStack is the csikit server side over one hostpath plugin: a
// store, a router over the in-memory transport to a node endpoint that
// holds the plugin's controller, and the Server.
func snapshotStack(b *testing.B, h *harness) *rpcshim.Server {
	b.Helper()
	client, err := plugin.New(plugin.Config{Endpoint: h.socket})
	must.NoError(b, err)
	b.Cleanup(func() { _ = client.Close() })
	store, err := state.NewMemStore(state.Config{})
	must.NoError(b, err)
	applier := state.NewLocalApplier(store)
	statuses := &rpcshim.InmemNodeStatuses{}
	statuses.Set("node-1", csi.NodeStatusReady)
	tr := rpcshim.NewInmemTransport()
	ep, err := rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{NodeID: "node-1", Plugins: &benchPlugins{client: client}, Mounter: noUnmount{}})
	must.NoError(b, err)
	tr.Register("node-1", ep)
	router, err := rpcshim.NewRouter(rpcshim.RouterConfig{Store: store, Transport: tr, NodeStatuses: statuses})
	must.NoError(b, err)
	srv, err := rpcshim.NewServer(rpcshim.ServerConfig{Store: store, Applier: applier, Router: router})
	must.NoError(b, err)
	ctx := context.Background()
	_, err = applier.Apply(ctx, state.UpsertNodePlugins{NodeID: "node-1", Plugins: []csi.PluginInfo{{
		PluginID: "hostpath", Type: csi.PluginTypeController, Healthy: true, RequiresController: true, UpdateTime: time.Now(),
		ControllerInfo: &csi.ControllerInfo{Capabilities: csi.ControllerCapabilities{CreateDeleteVolume: true, CreateDeleteSnapshot: true}},
	}}})
	must.NoError(b, err)
	return srv
}

// BenchmarkSnapshotVsRaw measures one snapshot's life (CreateSnapshot,
// then DeleteSnapshot) through the csikit server stack (intent, plugin
// call through the router and node endpoint, record, delete intent,
// delete, forget) against the same two CSI calls on a raw gRPC client,
// on the same hostpath plugin and volume, alternating, in the same run.
// snapshot-vs-raw is the ratio of the medians (goal ≤ 1.25).
func BenchmarkSnapshotVsRaw(b *testing.B) {
	h := start(b, hostpath.Config{})
	srv := snapshotStack(b, h)
	ctx := context.Background()
	cv, err := h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "bench", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}})
	must.NoError(b, err)
	ext := cv.GetVolume().GetVolumeId()
	_, err = srv.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
		ID: "bench", Namespace: "default", PluginID: "hostpath", ExternalID: ext,
		Capabilities: []csi.Capability{{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}},
	}})
	must.NoError(b, err)
	var stackNs, rawNs []float64
	i := 0
	stack := func() {
		id := fmt.Sprintf("s%d", i)
		start := time.Now()
		if _, err := srv.CreateSnapshot(ctx, &rpcshim.SnapshotCreateRequest{Namespace: "default", VolumeID: "bench", SnapshotID: id}); err != nil {
			b.Fatal(err)
		}
		if _, err := srv.DeleteSnapshot(ctx, &rpcshim.SnapshotDeleteRequest{Namespace: "default", SnapshotID: id}); err != nil {
			b.Fatal(err)
		}
		stackNs = append(stackNs, float64(time.Since(start)))
	}
	raw := func() {
		start := time.Now()
		cs, err := h.ctrl.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{SourceVolumeId: ext, Name: fmt.Sprintf("raw-%d", i)})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := h.ctrl.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: cs.GetSnapshot().GetSnapshotId()}); err != nil {
			b.Fatal(err)
		}
		rawNs = append(rawNs, float64(time.Since(start)))
	}
	for b.Loop() {
		i++
		// Alternate which goes first, so neither always meets a plugin
		// warmed up by the other.
		if i%2 == 0 {
			stack()
			raw()
		} else {
			raw()
			stack()
		}
	}
	s, r := median(stackNs), median(rawNs)
	b.ReportMetric(s/r, "snapshot-vs-raw")
	b.ReportMetric(s, "stack-ns")
	b.ReportMetric(r, "raw-ns")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
