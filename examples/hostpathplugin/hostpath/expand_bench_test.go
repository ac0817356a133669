package hostpath_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// benchPlugins serves one plugin client for both lookups, with the
// fingerprint the store holds.
type benchPlugins struct {
	client *plugin.Client
	info   *csi.PluginInfo
}

func (p *benchPlugins) ControllerPlugin(string) (plugin.ControllerClient, *csi.PluginInfo, error) {
	return p.client, p.info, nil
}

func (p *benchPlugins) NodePlugin(string) (plugin.NodeClient, *csi.PluginInfo, error) {
	return p.client, p.info, nil
}

// expandStack is the server stack over one hostpath monolith on node-1:
// MemStore, LocalApplier, Router, InmemTransport, NodeEndpoint, Mounter.
type expandStack struct {
	server  *rpcshim.Server
	applier *state.LocalApplier
	mounter *mounter.Mounter
	client  *plugin.Client
}

func newExpandStack(b *testing.B, h *harness) *expandStack {
	b.Helper()
	ctx := context.Background()
	client, err := plugin.New(plugin.Config{Endpoint: "unix://" + h.socket, MaxRetries: -1})
	must.NoError(b, err)
	b.Cleanup(func() { _ = client.Close() })
	info := &csi.PluginInfo{
		PluginID: "hostpath", AllocationID: "hp-1", Type: csi.PluginTypeMonolith, Healthy: true, Provider: hostpath.DefaultName,
		RequiresController: true, OnlineExpansion: true, UpdateTime: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		ControllerInfo: &csi.ControllerInfo{Capabilities: csi.ControllerCapabilities{PublishUnpublishVolume: true, ExpandVolume: true}},
		NodeInfo:       &csi.NodeInfo{ID: "node-1", Capabilities: csi.NodeCapabilities{StageUnstageVolume: true, ExpandVolume: true}},
	}
	plugins := &benchPlugins{client: client, info: info}
	store, err := state.NewMemStore(state.Config{})
	must.NoError(b, err)
	applier := state.NewLocalApplier(store)
	statuses := &rpcshim.InmemNodeStatuses{}
	statuses.Set("node-1", csi.NodeStatusReady)
	tr := rpcshim.NewInmemTransport()
	b.Cleanup(func() { _ = tr.Close() })
	router, err := rpcshim.NewRouter(rpcshim.RouterConfig{Store: store, Transport: tr, NodeStatuses: statuses})
	must.NoError(b, err)
	server, err := rpcshim.NewServer(rpcshim.ServerConfig{Store: store, Applier: applier, Router: router})
	must.NoError(b, err)
	dir := shortDir(b)
	mnt, err := mounter.New(mounter.Config{Root: filepath.Join(dir, "mnt"), StateDir: filepath.Join(dir, "state"), Plugins: plugins})
	must.NoError(b, err)
	b.Cleanup(func() { _ = mnt.Close() })
	ep, err := rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{NodeID: "node-1", Plugins: plugins, Mounter: mnt})
	must.NoError(b, err)
	tr.Register("node-1", ep)
	for _, cmd := range []state.Command{
		state.UpsertNodePlugins{NodeID: "node-1", Plugins: []csi.PluginInfo{*info}},
		state.UpsertAllocations{Allocations: []csi.Allocation{{ID: "a-stack", Namespace: "default", NodeID: "node-1"}, {ID: "a-raw", Namespace: "default", NodeID: "node-1"}}},
	} {
		_, err := applier.Apply(ctx, cmd)
		must.NoError(b, err)
	}
	return &expandStack{server: server, applier: applier, mounter: mnt, client: client}
}

// mounted creates volume id in the plugin, registers and claims it for
// alloc through the server, and mounts it with the mounter; it returns
// the volume's external ID and its target path.
func (s *expandStack) mounted(b *testing.B, id, alloc string) (string, string) {
	b.Helper()
	ctx := context.Background()
	capab := csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	v, err := s.client.CreateVolume(ctx, &plugin.CreateVolumeRequest{Name: id, CapacityMin: 1 << 20, Capabilities: []csi.Capability{capab}})
	must.NoError(b, err)
	_, err = s.server.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
		ID: id, Namespace: "default", PluginID: "hostpath", ExternalID: v.ExternalID, Capacity: v.Capacity, Capabilities: []csi.Capability{capab},
	}})
	must.NoError(b, err)
	claim, err := s.server.Claim(ctx, &rpcshim.VolumeClaimRequest{Namespace: "default", VolumeID: id, Claim: csi.Claim{
		AllocationID: alloc, NodeID: "node-1", Mode: csi.ClaimWrite, AccessMode: capab.AccessMode, AttachmentMode: capab.AttachmentMode,
	}})
	must.NoError(b, err)
	req, err := mounter.NewMountRequest(claim.Volume, claim.Claim)
	must.NoError(b, err)
	mi, err := s.mounter.MountVolume(ctx, req)
	must.NoError(b, err)
	return v.ExternalID, mi.Path
}

// BenchmarkExpandVsRaw measures one expansion of a mounted hostpath
// volume through the server stack (Server.ExpandVolume: three writes
// through the applier, ControllerExpandVolume through the Router and the
// node endpoint, NodeExpandVolume through the node endpoint and the
// mounter) against the raw RPCs it makes, ControllerExpandVolume then
// NodeExpandVolume on a plugin client, on a second mounted volume of the
// same plugin in the same iteration. Each plugin call fsyncs the
// plugin's state file, which both sides pay.
//
//	go test ./examples/hostpathplugin/hostpath -run '^$' -bench ExpandVsRaw -benchtime 200x
func BenchmarkExpandVsRaw(b *testing.B) {
	h := start(b, fullConfig(hostpath.MountSymlink))
	s := newExpandStack(b, h)
	s.mounted(b, "stack", "a-stack")
	rawID, rawTarget := s.mounted(b, "raw", "a-raw")
	ctx := context.Background()

	var stack, raw time.Duration
	i := int64(0)
	for b.Loop() {
		i++
		size := (1 + i) << 20
		t0 := time.Now()
		if _, err := s.server.ExpandVolume(ctx, &rpcshim.VolumeExpandRequest{Namespace: "default", VolumeID: "stack", RequiredBytes: size}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := s.client.ControllerExpandVolume(ctx, &plugin.ControllerExpandRequest{ExternalID: rawID, CapacityMin: size}); err != nil {
			b.Fatal(err)
		}
		if _, err := s.client.NodeExpandVolume(ctx, &plugin.NodeExpandRequest{ExternalID: rawID, VolumePath: rawTarget, CapacityMin: size}); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		stack += t1.Sub(t0)
		raw += t2.Sub(t1)
	}
	b.ReportMetric(float64(stack.Nanoseconds())/float64(b.N), "stack-ns/expand")
	b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), "raw-ns/expand")
	b.ReportMetric(float64(stack)/float64(raw), "expand-vs-raw")
}
