package rpcshim_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csikit/csikit/claimgc"
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/fingerprint"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
	"google.golang.org/grpc/codes"
)

// e2eNode is one node agent: its node plugin (a csitest fake), its
// fingerprint manager, its mounter and its node endpoint served over
// gRPC on a unix socket.
type e2eNode struct {
	id      string
	plugin  *csitest.Plugin // the node plugin
	manager *fingerprint.Manager
	mounter *mounter.Mounter
}

// e2eCluster is a server and three node agents wired only with exported
// API, the way a host does it: the server reaches the nodes through the
// gRPC transport, the nodes report fingerprints to the server's applier.
// n1 also runs the plugin's controller (a separate csitest fake).
type e2eCluster struct {
	store    *state.MemStore
	applier  *state.LocalApplier
	statuses *rpcshim.InmemNodeStatuses
	router   *rpcshim.Router
	server   *rpcshim.Server
	ctl      *csitest.Plugin
	nodes    map[string]*e2eNode
}

const e2eProvider = "e2e.csikit.io"

func newE2ECluster(t *testing.T) *e2eCluster {
	t.Helper()
	store, err := state.NewMemStore(state.Config{})
	must(t, err)
	c := &e2eCluster{
		store:    store,
		applier:  state.NewLocalApplier(store),
		statuses: &rpcshim.InmemNodeStatuses{},
		nodes:    make(map[string]*e2eNode),
	}
	book := &addrBook{}
	c.ctl = csitest.Start(t, csitest.Config{
		Type: csi.PluginTypeController, Name: e2eProvider,
		Controller: csi.ControllerCapabilities{PublishUnpublishVolume: true, CreateDeleteVolume: true},
	})
	for _, id := range []string{"n1", "n2", "n3"} {
		n := &e2eNode{id: id}
		// The node plugin is a monolith fake registered as a node
		// instance: it advertises CONTROLLER_SERVICE as a real split
		// plugin's node binary does, and checks node calls only, since
		// it does not itself advertise PUBLISH_UNPUBLISH_VOLUME.
		n.plugin = csitest.Start(t, csitest.Config{
			Type: csi.PluginTypeMonolith, Name: e2eProvider, NodeID: "csi-" + id,
			Node: csi.NodeCapabilities{StageUnstageVolume: true}, AdmitUnknownVolumes: true,
		})
		n.manager, err = fingerprint.New(fingerprint.Config{
			NodeID: id,
			Report: func(ctx context.Context, infos []*csi.PluginInfo) error {
				cmd := state.UpsertNodePlugins{NodeID: id}
				for _, in := range infos {
					cmd.Plugins = append(cmd.Plugins, *in)
				}
				_, err := c.applier.Apply(ctx, cmd)
				return err
			},
			// One fingerprint at registration is all this test needs.
			Interval: time.Hour,
		})
		must(t, err)
		must(t, n.manager.Register(fingerprint.Instance{PluginID: rtPlugin, AllocationID: "plugin-node-" + id, Type: csi.PluginTypeNode, Socket: n.plugin.Endpoint()}))
		if id == "n1" {
			must(t, n.manager.Register(fingerprint.Instance{PluginID: rtPlugin, AllocationID: "plugin-ctl-n1", Type: csi.PluginTypeController, Socket: c.ctl.Endpoint()}))
		}
		runManager(t, n.manager)

		dir := shortTempDir(t)
		n.mounter, err = mounter.New(mounter.Config{
			Root: filepath.Join(dir, "mnt"), StateDir: filepath.Join(dir, "state"), Plugins: n.manager, NoSync: true,
		})
		must(t, err)
		ep, err := rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{NodeID: id, Plugins: n.manager, Mounter: n.mounter})
		must(t, err)
		book.set(id, serveGRPCNode(t, ep).target)
		c.statuses.Set(id, csi.NodeStatusReady)
		c.nodes[id] = n
	}
	c.router, err = rpcshim.NewRouter(rpcshim.RouterConfig{Store: store, Transport: newGRPCTransport(t, book), NodeStatuses: c.statuses})
	must(t, err)
	c.server, err = rpcshim.NewServer(rpcshim.ServerConfig{Store: store, Applier: c.applier, Router: c.router})
	must(t, err)

	// The fingerprints arrive through Report; wait for all four.
	waitPlugin(t, store, func(p *csi.Plugin) bool {
		return p.ControllersHealthy == 1 && p.NodesHealthy == 3 && p.ControllerRequired
	})
	return c
}

func runManager(t *testing.T, m *fingerprint.Manager) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("fingerprint manager: %v", err)
		}
	})
}

// waitPlugin blocks on the store until plugin p1 satisfies ok.
func waitPlugin(t *testing.T, store *state.MemStore, ok func(*csi.Plugin) bool) {
	t.Helper()
	for {
		idx, err := store.Index(state.TablePlugins)
		must(t, err)
		if p, err := store.Plugin(rtPlugin); err == nil && ok(p) {
			return
		}
		if _, err := store.Wait(t.Context(), state.TablePlugins, idx); err != nil {
			t.Fatalf("waiting for the plugin's fingerprints: %v", err)
		}
	}
}

// TestE2E_ClaimMountDetach runs a volume's whole life across a server
// and three node agents over gRPC: register, claim, mount, a second
// claim on the same node, node detach of both, controller detach.
func TestE2E_ClaimMountDetach(t *testing.T) {
	c := newE2ECluster(t)
	ctx := context.Background()
	n2 := c.nodes["n2"]
	capab := mnmwFS

	// The host reports the workloads.
	_, err := c.applier.Apply(ctx, state.UpsertAllocations{Allocations: []csi.Allocation{
		{ID: "web-1", Namespace: "default", NodeID: "n2"},
		{ID: "web-2", Namespace: "default", NodeID: "n2"},
	}})
	must(t, err)

	// Register: the capabilities are validated by the controller on n1.
	c.ctl.AddVolume("ext-1", 1<<30, map[string]string{"zone": "a"})
	reg, err := c.server.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
		ID: "data", Namespace: "default", PluginID: rtPlugin, ExternalID: "ext-1",
		Capabilities: []csi.Capability{capab}, Secrets: csi.Secrets{"token": "s3cr3t"},
		Context: map[string]string{"zone": "a"},
	}})
	must(t, err)
	expectEqual(t, reg.ControllerNodeID, "n1")

	// First claim on n2: one ControllerPublish, to n2's CSI node ID.
	claim := func(alloc string) *rpcshim.VolumeClaimResponse {
		t.Helper()
		r, err := c.server.Claim(ctx, &rpcshim.VolumeClaimRequest{Namespace: "default", VolumeID: "data", Claim: csi.Claim{
			AllocationID: alloc, NodeID: "n2", Mode: csi.ClaimWrite, AccessMode: capab.AccessMode, AttachmentMode: capab.AttachmentMode,
		}})
		must(t, err)
		return r
	}
	r1 := claim("web-1")
	devicePath := map[string]string{"devicePath": "/dev/fake-ext-1"}
	expectEqual(t, r1.Claim.ExternalNodeID, "csi-n2")
	expectEqual(t, r1.Attachment.PublishContext, devicePath)
	expectEqual(t, r1.ControllerNodeID, "n1")
	expectEqual(t, publishedTo(c.ctl), []string{"csi-n2"})
	expectEqual(t, n2.plugin.CallCount(csitest.MethodNodeStageVolume), 0) // nothing on the node yet

	// The node agent mounts it with what the claim returned.
	mount := func(r *rpcshim.VolumeClaimResponse) *mounter.MountInfo {
		t.Helper()
		req, err := mounter.NewMountRequest(r.Volume, r.Claim)
		must(t, err)
		info, err := n2.mounter.MountVolume(ctx, req)
		must(t, err)
		if _, err := os.Stat(filepath.Join(info.Path, csitest.MarkerFile)); err != nil {
			t.Errorf("the published target %s holds no marker: %v", info.Path, err)
		}
		return info
	}
	mount(r1)
	stage := n2.plugin.CallsTo(csitest.MethodNodeStageVolume)
	expectEqual(t, len(stage), 1)
	expectEqual(t, stage[0].Request.(*csipb.NodeStageVolumeRequest).GetPublishContext(), devicePath)

	// Second claim on n2: no second ControllerPublish, same context.
	r2 := claim("web-2")
	expectEqual(t, r2.Attachment.PublishContext, devicePath)
	expectEqual(t, r2.ControllerNodeID, "") // nothing published this time
	expectEqual(t, publishedTo(c.ctl), []string{"csi-n2"})
	mount(r2)

	// The workloads stop; the node step runs on n2 through the router.
	_, err = c.applier.Apply(ctx, state.UpsertAllocations{ReleasedAt: rtTime, Allocations: []csi.Allocation{
		{ID: "web-1", Namespace: "default", NodeID: "n2", Terminal: true},
		{ID: "web-2", Namespace: "default", NodeID: "n2", Terminal: true},
	}})
	must(t, err)
	vol, err := c.store.Volume("default", "data")
	must(t, err)
	must(t, c.router.NodeDetach(ctx, vol, vol.PastClaims["web-1"]))
	expectEqual(t, n2.plugin.CallCount(csitest.MethodNodeUnstageVolume), 0) // web-2 still uses it
	must(t, c.router.NodeDetach(ctx, vol, vol.PastClaims["web-2"]))

	// The controller step, once nothing on n2 uses the volume.
	must(t, c.router.ControllerDetach(ctx, vol, vol.PastClaims["web-1"]))
	unpub := c.ctl.CallsTo(csitest.MethodControllerUnpublishVolume)
	expectEqual(t, len(unpub), 1)
	expectEqual(t, unpub[0].Request.(*csipb.ControllerUnpublishVolumeRequest).GetNodeId(), "csi-n2")

	// The plugins' logs: order and counts, and no lifecycle violation.
	c.ctl.RequireSequence(t, csitest.MethodValidateVolumeCapabilities, csitest.MethodControllerPublishVolume, csitest.MethodControllerUnpublishVolume)
	expectEqual(t, c.ctl.CallCount(csitest.MethodControllerPublishVolume), 1)
	n2.plugin.RequireSequence(t,
		csitest.MethodNodeStageVolume, csitest.MethodNodePublishVolume, csitest.MethodNodePublishVolume,
		csitest.MethodNodeUnpublishVolume, csitest.MethodNodeUnpublishVolume, csitest.MethodNodeUnstageVolume)
	for _, m := range []string{csitest.MethodNodeStageVolume, csitest.MethodNodeUnstageVolume} {
		expectEqual(t, n2.plugin.CallCount(m), 1)
	}
	for _, m := range []string{csitest.MethodNodePublishVolume, csitest.MethodNodeUnpublishVolume} {
		expectEqual(t, n2.plugin.CallCount(m), 2)
	}
	if st, ok := n2.plugin.Volume("ext-1"); !ok || st.InUse() {
		t.Errorf("n2 still holds the volume: %+v", st)
	}
	for _, id := range []string{"n1", "n3"} {
		expectEqual(t, c.nodes[id].plugin.CallCount(csitest.MethodNodeStageVolume), 0)
		expectEqual(t, c.nodes[id].plugin.CallCount(csitest.MethodNodePublishVolume), 0)
	}
	c.ctl.RequireNoViolations(t)
	for _, n := range c.nodes {
		n.plugin.RequireNoViolations(t)
	}
	if st, ok := c.ctl.Volume("ext-1"); !ok || len(st.AttachedNodes()) != 0 {
		t.Errorf("the controller still attaches the volume: %+v", st)
	}
}

// TestE2E_ControllerGone checks routing over gRPC when the controller's
// plugin goes away on its node: the node answers "plugin not found"
// (Retryable) and, with no other controller, the router says no
// controller is available and why.
func TestE2E_ControllerGone(t *testing.T) {
	c := newE2ECluster(t)
	ctx := context.Background()
	// The store still lists n1's controller as healthy, but the node
	// agent no longer runs it.
	must(t, c.nodes["n1"].manager.Deregister(rtPlugin, "plugin-ctl-n1"))
	_, err := c.router.ControllerPublish(ctx, rtPublishRequestFor("ext-1", "csi-n2"))
	if err == nil {
		t.Fatal("a publish with no controller running succeeded")
	}
	expectIs(t, err, csi.ErrNoController)
	expectClass(t, err, csi.ClassRetryable)
	// Either the router reached n1 and heard "plugin not found", or the
	// deregistration's report already reached the store.
	var nc *rpcshim.NoControllerError
	if expectAs(t, err, &nc) && len(nc.PassedOver) > 0 {
		expectEqual(t, nc.PassedOver[0].NodeID, "n1")
	}
	expectEqual(t, c.ctl.CallCount(csitest.MethodControllerPublishVolume), 0)
}

func expectAs[T error](t *testing.T, err error, target *T) bool {
	t.Helper()
	if !errors.As(err, target) {
		t.Errorf("error %v holds no %T", err, *target)
		return false
	}
	return true
}

// TestE2E_ReleaseWorker releases a mounted claim with the real claim
// release worker, whose node and controller steps are the Router's:
// NodeUnpublish and NodeUnstage on the claim's node, then
// ControllerUnpublish through the controller, then the claim is freed.
func TestE2E_ReleaseWorker(t *testing.T) {
	c := newE2ECluster(t)
	ctx := context.Background()
	n2 := c.nodes["n2"]
	_, err := c.applier.Apply(ctx, state.UpsertAllocations{Allocations: []csi.Allocation{{ID: "web-1", Namespace: "default", NodeID: "n2"}}})
	must(t, err)
	c.ctl.AddVolume("ext-1", 1<<30, nil)
	_, err = c.server.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
		ID: "data", Namespace: "default", PluginID: rtPlugin, ExternalID: "ext-1", Capabilities: []csi.Capability{snwFS},
	}})
	must(t, err)
	r, err := c.server.Claim(ctx, &rpcshim.VolumeClaimRequest{Namespace: "default", VolumeID: "data", Claim: csi.Claim{
		AllocationID: "web-1", NodeID: "n2", Mode: csi.ClaimWrite, AccessMode: snwFS.AccessMode, AttachmentMode: snwFS.AttachmentMode,
	}})
	must(t, err)
	req, err := mounter.NewMountRequest(r.Volume, r.Claim)
	must(t, err)
	_, err = n2.mounter.MountVolume(ctx, req)
	must(t, err)

	startWorker(t, claimgc.Config{
		Store: c.store, Applier: c.applier, Nodes: c.router, Controllers: c.router, NodeStatuses: c.statuses,
	})
	_, err = c.applier.Apply(ctx, state.UpsertAllocations{ReleasedAt: rtTime, Allocations: []csi.Allocation{
		{ID: "web-1", Namespace: "default", NodeID: "n2", Terminal: true},
	}})
	must(t, err)
	waitStoreVolume(t, c.store, "data", func(v *csi.Volume) bool { return !v.InUse() })

	n2.plugin.RequireSequence(t, csitest.MethodNodeStageVolume, csitest.MethodNodePublishVolume,
		csitest.MethodNodeUnpublishVolume, csitest.MethodNodeUnstageVolume)
	c.ctl.RequireSequence(t, csitest.MethodControllerPublishVolume, csitest.MethodControllerUnpublishVolume)
	unpub := c.ctl.CallsTo(csitest.MethodControllerUnpublishVolume)
	expectEqual(t, len(unpub), 1)
	expectEqual(t, unpub[0].Request.(*csipb.ControllerUnpublishVolumeRequest).GetNodeId(), "csi-n2")
	expectEqual(t, c.ctl.CallCount(csitest.MethodControllerPublishVolume), 1)
	c.ctl.RequireNoViolations(t)
	n2.plugin.RequireNoViolations(t)
}

// TestE2E_ClaimPublishTimedOut: the plugin's ControllerPublishVolume
// times out. The claim is kept with its attachment Attaching, the error
// is Uncertain with the plugin's code (not csi.ErrNoController: the
// controller is there), and the same claim repeated completes the
// attachment with one more ControllerPublish.
func TestE2E_ClaimPublishTimedOut(t *testing.T) {
	c := newE2ECluster(t)
	ctx := context.Background()
	_, err := c.applier.Apply(ctx, state.UpsertAllocations{Allocations: []csi.Allocation{{ID: "web-1", Namespace: "default", NodeID: "n2"}}})
	must(t, err)
	c.ctl.AddVolume("ext-1", 1<<30, map[string]string{"zone": "a"})
	_, err = c.server.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
		ID: "data", Namespace: "default", PluginID: rtPlugin, ExternalID: "ext-1",
		Capabilities: []csi.Capability{mnmwFS}, Context: map[string]string{"zone": "a"},
	}})
	must(t, err)
	req := &rpcshim.VolumeClaimRequest{Namespace: "default", VolumeID: "data", Claim: csi.Claim{
		AllocationID: "web-1", NodeID: "n2", Mode: csi.ClaimWrite, AccessMode: mnmwFS.AccessMode, AttachmentMode: mnmwFS.AttachmentMode,
	}}

	c.ctl.FailNext(csitest.MethodControllerPublishVolume, codes.DeadlineExceeded, 1)
	_, err = c.server.Claim(ctx, req)
	mustErr(t, err)
	expectClass(t, err, csi.ClassUncertain)
	expectEqual(t, csi.CodeOf(err), csi.CodeDeadlineExceeded)
	if errors.Is(err, csi.ErrNoController) {
		t.Fatalf("a timed-out publish reads as no controller: %v", err)
	}
	vol, err := c.store.Volume("default", "data")
	must(t, err)
	if vol.WriteClaims["web-1"] == nil {
		t.Fatal("the claim was dropped after a publish whose outcome is unknown")
	}
	if a := vol.Attachments["n2"]; a == nil || a.State != csi.AttachmentAttaching {
		t.Fatalf("attachment on n2 = %+v, want Attaching", a)
	}

	resp, err := c.server.Claim(ctx, req)
	must(t, err)
	expectEqual(t, resp.Attachment.State, csi.AttachmentAttached)
	expectEqual(t, c.ctl.CallCount(csitest.MethodControllerPublishVolume), 2)
}
