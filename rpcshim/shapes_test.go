package rpcshim_test

import (
	"context"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/csikit/csikit/claimgc"
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/fingerprint"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// TestE2E_Shapes runs claim → mount → release over every way the spec
// lets a plugin answer (csitest.Shapes): one plugin on node n1 serving
// the controller and the node (or the node only), the server, the
// node's mounter behind its endpoint, and the claim release worker.
// Two allocations share the volume on n1: one ControllerPublish (none
// without PUBLISH_UNPUBLISH_VOLUME), whatever the publish context; the
// plugin's attachments equal the store's records after the claims and
// after the release; no lifecycle violation.
func TestE2E_Shapes(t *testing.T) {
	for _, shape := range csitest.Shapes() {
		t.Run(shape.Name, func(t *testing.T) {
			cfg := csitest.Config{
				Type: csi.PluginTypeMonolith, Name: e2eProvider, NodeID: "csi-n1",
				Controller: csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true},
				Node:       csi.NodeCapabilities{StageUnstageVolume: true},
			}
			shape.Apply(&cfg)
			runShape(t, cfg)
		})
	}
}

func runShape(t *testing.T, cfg csitest.Config) {
	ctx := context.Background()
	store, err := state.NewMemStore(state.Config{})
	must(t, err)
	applier := state.NewLocalApplier(store)
	statuses := &rpcshim.InmemNodeStatuses{}
	tr := rpcshim.NewInmemTransport()
	p := csitest.Start(t, cfg)

	mgr, err := fingerprint.New(fingerprint.Config{
		NodeID: "n1",
		Report: func(ctx context.Context, infos []*csi.PluginInfo) error {
			cmd := state.UpsertNodePlugins{NodeID: "n1"}
			for _, in := range infos {
				cmd.Plugins = append(cmd.Plugins, *in)
			}
			_, err := applier.Apply(ctx, cmd)
			return err
		},
		Interval: time.Hour,
	})
	must(t, err)
	typ := csi.PluginTypeNode
	if cfg.Type.HasController() {
		typ = csi.PluginTypeMonolith
	}
	must(t, mgr.Register(fingerprint.Instance{PluginID: rtPlugin, AllocationID: "plugin-n1", Type: typ, Socket: p.Endpoint()}))
	runManager(t, mgr)
	dir := shortTempDir(t)
	mnt, err := mounter.New(mounter.Config{Root: filepath.Join(dir, "mnt"), StateDir: filepath.Join(dir, "state"), Plugins: mgr, NoSync: true})
	must(t, err)
	ep, err := rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{NodeID: "n1", Plugins: mgr, Mounter: mnt})
	must(t, err)
	tr.Register("n1", ep)
	statuses.Set("n1", csi.NodeStatusReady)
	router, err := rpcshim.NewRouter(rpcshim.RouterConfig{Store: store, Transport: tr, NodeStatuses: statuses})
	must(t, err)
	srv, err := rpcshim.NewServer(rpcshim.ServerConfig{Store: store, Applier: applier, Router: router})
	must(t, err)
	waitPlugin(t, store, func(pl *csi.Plugin) bool { return pl.NodesHealthy == 1 })

	_, err = applier.Apply(ctx, state.UpsertAllocations{Allocations: []csi.Allocation{
		{ID: "web-1", Namespace: "default", NodeID: "n1"}, {ID: "web-2", Namespace: "default", NodeID: "n1"},
	}})
	must(t, err)
	vol := csi.Volume{ID: "data", Namespace: "default", PluginID: rtPlugin, Capabilities: []csi.Capability{mnmwFS}}
	var ext string
	if cfg.Type.HasController() && cfg.Controller.CreateDeleteVolume {
		r, err := srv.CreateVolume(ctx, &rpcshim.VolumeCreateRequest{Volume: vol})
		must(t, err)
		ext = r.Volume.ExternalID
	} else {
		ext = "ext-data"
		p.AddVolume(ext, 1<<30, nil)
		vol.ExternalID = ext
		_, err := srv.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: vol})
		must(t, err)
	}

	// The store's attachment records, as the plugin's model holds them:
	// only those made with ControllerPublishVolume.
	needsPublish := cfg.Type.HasController() && cfg.Controller.PublishUnpublishVolume
	records := func() map[string][]string {
		out := map[string][]string{}
		v, err := store.Volume("default", "data")
		must(t, err)
		if !needsPublish {
			return out
		}
		for _, a := range v.Attachments {
			if a.State == csi.AttachmentAttached {
				out[ext] = append(out[ext], a.ExternalNodeID)
			}
		}
		return out
	}

	for _, alloc := range []string{"web-1", "web-2"} {
		r, err := srv.Claim(ctx, &rpcshim.VolumeClaimRequest{Namespace: "default", VolumeID: "data", Claim: csi.Claim{
			AllocationID: alloc, NodeID: "n1", Mode: csi.ClaimWrite, AccessMode: mnmwFS.AccessMode, AttachmentMode: mnmwFS.AttachmentMode,
		}})
		must(t, err)
		expectEqual(t, r.Attachment.State, csi.AttachmentAttached)
		req, err := mounter.NewMountRequest(r.Volume, r.Claim)
		must(t, err)
		_, err = mnt.MountVolume(ctx, req)
		must(t, err)
	}
	wantPublishes := 0
	if needsPublish {
		wantPublishes = 1
	}
	expectEqual(t, p.CallCount(csitest.MethodControllerPublishVolume), wantPublishes)
	if got, want := p.Attachments(), records(); !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("plugin's attachments %v, store's records %v", got, want)
	}

	startWorker(t, claimgc.Config{Store: store, Applier: applier, Nodes: router, Controllers: router, NodeStatuses: statuses})
	_, err = applier.Apply(ctx, state.UpsertAllocations{ReleasedAt: rtTime, Allocations: []csi.Allocation{
		{ID: "web-1", Namespace: "default", NodeID: "n1", Terminal: true}, {ID: "web-2", Namespace: "default", NodeID: "n1", Terminal: true},
	}})
	must(t, err)
	waitStoreVolume(t, store, "data", func(v *csi.Volume) bool { return !v.InUse() })
	expectEqual(t, p.CallCount(csitest.MethodControllerUnpublishVolume), wantPublishes)
	if got := p.Attachments(); len(got) != 0 {
		t.Errorf("plugin's attachments after the release: %v", got)
	}
	if v, _ := p.Volume(ext); v.InUse() {
		t.Errorf("plugin still uses the volume after the release: %+v", v)
	}
	p.RequireNoViolations(t)
}
