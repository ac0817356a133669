package claimgc_test

// The test harness: a small cluster built from real parts. Each host
// node has a csitest node plugin on its own unix socket, a real
// plugin.Client and a real mounter.Mounter; one csitest controller plugin
// serves the controller calls. The state is a real state.MemStore
// written through state.LocalApplier.
//
// The Worker reaches the nodes and the controller through testNodes and
// testController below, which stand in for the rpcshim router and its
// transport; this file is the only one that knows, so it can be swapped
// for the router over its in-memory transport.

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/claimgc"
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/state"
)

const (
	testNamespace = "default"
	testPluginID  = "fake-csi"
	// controllerNode runs the controller plugin instance.
	controllerNode = "n1"
)

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// harnessOptions shapes a harness.
type harnessOptions struct {
	// nodes is the number of host nodes, n1…nN; default 3.
	nodes int
	// clock drives the workers (and stamps releases); default a Fake.
	clock clock.Clock
	// noControllerPublish makes the controller not advertise
	// PUBLISH_UNPUBLISH_VOLUME.
	noControllerPublish bool
	// clientRetries is the plugin clients' own MaxRetries; default -1
	// (none), so that every failure reaches the worker.
	clientRetries int
	// baseDir holds the sockets, mount roots and mounter state; default
	// the system's temporary directory.
	baseDir string
}

type harness struct {
	t       testing.TB
	clock   clock.Clock
	fake    *clock.Fake // nil when the clock is real
	store   *state.MemStore
	applier *state.LocalApplier

	nodeIDs    []string
	nodes      map[string]*testNode
	ctrl       *csitest.Plugin
	ctrlClient *plugin.Client
	statuses   *nodeStatuses
	order      *callOrder

	controllerPublish bool

	mu     sync.Mutex
	allocs map[string]csi.Allocation
}

// testNode is one host node: its node plugin, client, registry and
// mounter.
type testNode struct {
	id       string
	csiID    string
	fake     *csitest.Plugin
	client   *plugin.Client
	registry *registry
	mounter  *mounter.Mounter
}

func newHarness(t testing.TB, o harnessOptions) *harness {
	t.Helper()
	if o.nodes == 0 {
		o.nodes = 3
	}
	if o.clientRetries == 0 {
		o.clientRetries = -1
	}
	h := &harness{
		t:                 t,
		clock:             o.clock,
		controllerPublish: !o.noControllerPublish,
		nodes:             map[string]*testNode{},
		statuses:          &nodeStatuses{m: map[string]csi.NodeStatus{}},
		order:             &callOrder{},
		allocs:            map[string]csi.Allocation{},
	}
	if h.clock == nil {
		h.fake = clock.NewFake(epoch)
		h.clock = h.fake
	}
	st, err := state.NewMemStore(state.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h.store, h.applier = st, state.NewLocalApplier(st)
	dir := shortTempDir(t, o.baseDir)

	ctrlCaps := csi.ControllerCapabilities{PublishUnpublishVolume: !o.noControllerPublish}
	h.ctrl = csitest.Start(t, csitest.Config{
		Type:       csi.PluginTypeController,
		Controller: ctrlCaps,
		Endpoint:   filepath.Join(dir, "ctrl.sock"),
	})
	h.ctrlClient = newClient(t, h.ctrl.Endpoint(), o.clientRetries)

	for i := 1; i <= o.nodes; i++ {
		id := fmt.Sprintf("n%d", i)
		n := &testNode{id: id, csiID: "csi-" + id}
		n.fake = csitest.Start(t, csitest.Config{
			Type:                csi.PluginTypeNode,
			Node:                csi.NodeCapabilities{StageUnstageVolume: true},
			NodeID:              n.csiID,
			AdmitUnknownVolumes: true,
			Endpoint:            filepath.Join(dir, id+".sock"),
		})
		n.client = newClient(t, n.fake.Endpoint(), o.clientRetries)
		n.registry = &registry{client: n.client, info: h.nodePluginInfo(n), registered: true}
		m, err := mounter.New(mounter.Config{
			Root:     filepath.Join(dir, id, "mnt"),
			StateDir: filepath.Join(dir, id, "state"),
			Plugins:  n.registry,
			NoSync:   true,
		})
		if err != nil {
			t.Fatal(err)
		}
		n.mounter = m
		h.nodes[id] = n
		h.nodeIDs = append(h.nodeIDs, id)
		h.statuses.set(id, csi.NodeStatusReady)

		plugins := []csi.PluginInfo{*n.registry.info}
		if id == controllerNode {
			plugins = append(plugins, csi.PluginInfo{
				PluginID: testPluginID, Type: csi.PluginTypeController, Healthy: true,
				RequiresController: true, UpdateTime: epoch,
				ControllerInfo: &csi.ControllerInfo{Capabilities: ctrlCaps},
			})
		}
		h.apply(state.UpsertNodePlugins{NodeID: id, Plugins: plugins})
	}
	h.clearFaults()
	return h
}

// clearFaults removes every injected fault and puts back the hooks that
// record the order of teardown calls and check them across plugins.
func (h *harness) clearFaults() {
	h.ctrl.ClearFaults()
	h.ctrl.SetHook(csitest.MethodControllerUnpublishVolume, h.checkControllerUnpublish)
	for _, id := range h.nodeIDs {
		n := h.nodes[id]
		n.fake.ClearFaults()
		for _, method := range []string{csitest.MethodNodeUnpublishVolume, csitest.MethodNodeUnstageVolume} {
			n.fake.SetHook(method, h.order.hook(id))
		}
	}
}

func (h *harness) nodePluginInfo(n *testNode) *csi.PluginInfo {
	return &csi.PluginInfo{
		PluginID: testPluginID, Type: csi.PluginTypeNode, Healthy: true,
		RequiresController: true, UpdateTime: epoch,
		NodeInfo: &csi.NodeInfo{ID: n.csiID, Capabilities: csi.NodeCapabilities{StageUnstageVolume: true}},
	}
}

// shortTempDir returns a directory whose paths fit a unix socket address.
func shortTempDir(t testing.TB, base string) string {
	t.Helper()
	dir, err := os.MkdirTemp(base, "cgc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newClient(t testing.TB, endpoint string, retries int) *plugin.Client {
	t.Helper()
	c, err := plugin.New(plugin.Config{Endpoint: endpoint, MaxRetries: retries, CallTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (h *harness) apply(cmd state.Command) state.Result {
	h.t.Helper()
	res, err := h.applier.Apply(context.Background(), cmd)
	if err != nil {
		h.t.Fatalf("apply %s: %v", cmd.Kind(), err)
	}
	return res
}

// addVolume registers a volume (ExternalID "ext-<id>") with the given
// access mode and seeds the controller plugin's model with it.
func (h *harness) addVolume(id string, mode csi.AccessMode) {
	h.t.Helper()
	v := csi.Volume{
		ID: id, Namespace: testNamespace, ExternalID: "ext-" + id, PluginID: testPluginID,
		Capabilities: []csi.Capability{{AccessMode: mode, AttachmentMode: csi.AttachmentModeFileSystem}},
		Secrets:      csi.Secrets{"token": "s3cr3t-" + id},
	}
	h.apply(state.RegisterVolume{Volume: v})
	h.ctrl.AddVolume(v.ExternalID, 1<<30, nil)
}

// claim places a running allocation on node and claims the volume for
// it, as the claim flow would: claim written first, then
// ControllerPublish (when the plugin advertises it), then the mount on
// the node.
func (h *harness) claim(volID, allocID, node string) {
	h.t.Helper()
	if err := h.tryClaim(context.Background(), volID, allocID, node); err != nil {
		h.t.Fatal(err)
	}
}

// tryClaim is claim for any goroutine: it returns its error.
func (h *harness) tryClaim(ctx context.Context, volID, allocID, node string) error {
	h.mu.Lock()
	a, ok := h.allocs[allocID]
	if !ok {
		a = csi.Allocation{ID: allocID, Namespace: testNamespace, NodeID: node}
		h.allocs[allocID] = a
	}
	h.mu.Unlock()
	if !ok {
		if _, err := h.applier.Apply(ctx, state.UpsertAllocations{Allocations: []csi.Allocation{a}}); err != nil {
			return err
		}
	}
	vol, err := h.store.Volume(testNamespace, volID)
	if err != nil {
		return err
	}
	res, err := h.applier.Apply(ctx, state.ClaimVolume{Namespace: testNamespace, VolumeID: volID, Claim: csi.Claim{
		AllocationID: allocID, NodeID: node, Mode: csi.ClaimWrite,
		AccessMode: vol.Capabilities[0].AccessMode, AttachmentMode: vol.Capabilities[0].AttachmentMode,
	}})
	if err != nil {
		return fmt.Errorf("claim %s for %s: %w", volID, allocID, err)
	}
	c := res.Claim
	if h.controllerPublish {
		pc, err := h.ctrlClient.ControllerPublishVolume(ctx, &plugin.ControllerPublishRequest{
			ExternalID: vol.ExternalID, ExternalNodeID: c.ExternalNodeID,
			Capability: c.Capability(), Secrets: vol.Secrets,
		})
		if err != nil {
			return fmt.Errorf("ControllerPublish of %s to %s: %w", volID, node, err)
		}
		if _, err := h.applier.Apply(ctx, state.AttachVolume{
			Namespace: testNamespace, VolumeID: volID, NodeID: node, PublishContext: pc,
		}); err != nil {
			return err
		}
	} else if res.Attachment.State != csi.AttachmentAttached {
		if _, err := h.applier.Apply(ctx, state.AttachVolume{Namespace: testNamespace, VolumeID: volID, NodeID: node}); err != nil {
			return err
		}
	}
	if vol, err = h.store.Volume(testNamespace, volID); err != nil {
		return err
	}
	req, err := mounter.NewMountRequest(vol, c)
	if err != nil {
		return err
	}
	if _, err := h.nodes[node].mounter.MountVolume(ctx, req); err != nil {
		return fmt.Errorf("mount %s for %s on %s: %w", volID, allocID, node, err)
	}
	return nil
}

// release makes allocations terminal, as the host reports a stopped
// allocation; their claims become past claims.
func (h *harness) release(allocIDs ...string) {
	h.t.Helper()
	var as []csi.Allocation
	h.mu.Lock()
	for _, id := range allocIDs {
		a, ok := h.allocs[id]
		if !ok {
			h.mu.Unlock()
			h.t.Fatalf("release of unknown allocation %s", id)
		}
		a.Terminal = true
		h.allocs[id] = a
		as = append(as, a)
	}
	h.mu.Unlock()
	h.apply(state.UpsertAllocations{Allocations: as, ReleasedAt: h.clock.Now()})
}

// requireControllerStepOnly checks that a worker with stats st released
// one claim from the controller step on: no node step of its own, one
// ControllerUnpublish, one free.
func (h *harness) requireControllerStepOnly(st claimgc.Stats) {
	h.t.Helper()
	if got := h.ctrl.CallCount(ctrlUnpublish); got != 1 {
		h.t.Errorf("ControllerUnpublish calls = %d, want 1", got)
	}
	if st.NodeDetached != 0 || st.ControllerDetached != 1 || st.Freed != 1 {
		h.t.Errorf("worker stats = %+v, want no node step, one controller step, one free", st)
	}
}

// workerConfig is the Config the tests start from: the harness's
// detachers and node statuses, the fake clock, short retries and a
// backstop scan far away.
func (h *harness) workerConfig() claimgc.Config {
	return claimgc.Config{
		Store:              h.store,
		Applier:            h.applier,
		Nodes:              testNodes{h},
		Controllers:        testController{h},
		NodeStatuses:       h.statuses,
		Clock:              h.clock,
		RetryBase:          time.Second,
		RetryMax:           8 * time.Second,
		FinalRetryInterval: 10 * time.Minute,
		ScanInterval:       time.Hour,
		Logger:             testLogger(h.t),
	}
}

func testLogger(t testing.TB) hclog.Logger {
	if os.Getenv("CLAIMGC_TEST_LOG") == "" {
		return nil
	}
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Debug})
}

// startWorker builds a worker from cfg, runs it, and stops it when the
// test ends. enable enables it at once.
func (h *harness) startWorker(cfg claimgc.Config, enable bool) *runningWorker {
	h.t.Helper()
	w, err := claimgc.New(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rw := &runningWorker{Worker: w, cancel: cancel, done: make(chan error, 1)}
	go func() { rw.done <- w.Run(ctx) }()
	if enable {
		w.SetEnabled(true)
	}
	h.t.Cleanup(func() {
		rw.stop()
		if rw.err != nil {
			h.t.Errorf("Run returned %v after its ctx ended, want nil", rw.err)
		}
	})
	return rw
}

type runningWorker struct {
	*claimgc.Worker
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// stop cancels Run and waits for it to return.
func (rw *runningWorker) stop() {
	rw.once.Do(func() {
		rw.cancel()
		rw.err = <-rw.done
	})
}

// settle waits for the worker to have nothing to do now. The bound is a
// hang guard, not a timing assertion.
func (h *harness) settle(w *runningWorker) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Settle(ctx); err != nil {
		idx, _ := h.store.Index(state.TableVolumes)
		h.t.Fatalf("worker did not settle: %v (stats %+v; volume index %d; %s)", err, w.Stats(), idx, w.DebugState())
	}
}

// advance moves the fake clock and lets the worker act on it.
func (h *harness) advance(w *runningWorker, d time.Duration) {
	h.t.Helper()
	h.fake.Advance(d)
	h.settle(w)
}

// claimOf returns the allocation's claim on the volume, or nil.
func (h *harness) claimOf(volID, allocID string) *csi.Claim {
	h.t.Helper()
	return h.volume(volID).Claim(allocID)
}

// volume reads a volume of the test namespace.
func (h *harness) volume(volID string) *csi.Volume {
	h.t.Helper()
	v, err := h.store.Volume(testNamespace, volID)
	if err != nil {
		h.t.Fatal(err)
	}
	return v
}

// pastClaims counts the past claims left in the store.
func (h *harness) pastClaims() int {
	h.t.Helper()
	vols, err := h.store.VolumesWithPastClaims()
	if err != nil {
		h.t.Fatal(err)
	}
	n := 0
	for _, v := range vols {
		n += len(v.PastClaims)
	}
	return n
}

// requireNoPastClaims stops the test if any past claim is left in the
// store; when says at which point of the test, for the failure.
func (h *harness) requireNoPastClaims(when string) {
	h.t.Helper()
	if n := h.pastClaims(); n != 0 {
		h.t.Fatalf("%d past claims left %s", n, when)
	}
}

// requireNoViolations checks every plugin's lifecycle checker and the
// harness's own cross-plugin checks.
func (h *harness) requireNoViolations() {
	h.t.Helper()
	h.ctrl.RequireNoViolations(h.t)
	for _, id := range h.nodeIDs {
		h.nodes[id].fake.RequireNoViolations(h.t)
	}
	if v := h.order.violationsList(); len(v) > 0 {
		h.t.Fatalf("cross-plugin violations:\n  %s", strings.Join(v, "\n  "))
	}
}

// requireDetached checks that nothing of the volume is left: no
// attachment on the controller, nothing staged or published on any node,
// nothing tracked by any mounter for the allocations.
func (h *harness) requireDetached(volID string, allocIDs ...string) {
	h.t.Helper()
	if st, ok := h.ctrl.Volume("ext-" + volID); ok && len(st.Attachments) > 0 {
		h.t.Errorf("volume %s is still attached to %v", volID, slices.Collect(maps.Keys(st.Attachments)))
	}
	for _, id := range h.nodeIDs {
		n := h.nodes[id]
		if h.statuses.get(id) == csi.NodeStatusGone {
			continue
		}
		if st, ok := n.fake.Volume("ext-" + volID); ok && (len(st.Staged) > 0 || len(st.Published) > 0) {
			h.t.Errorf("volume %s on node %s: staged %d, published %d", volID, id, len(st.Staged), len(st.Published))
		}
		for _, a := range allocIDs {
			has, err := n.mounter.HasMount(context.Background(), testNamespace, volID, a)
			if err != nil || has {
				h.t.Errorf("mounter of %s still tracks %s for %s (err %v)", id, volID, a, err)
			}
		}
	}
}

// checkControllerUnpublish is the controller plugin's hook: when
// ControllerUnpublishVolume reaches the plugin, the node it detaches
// from must have the volume neither staged nor published. No single
// fake can see this, since the controller and the nodes are separate
// plugins.
func (h *harness) checkControllerUnpublish(_ context.Context, method string, req any) error {
	r := req.(interface {
		GetVolumeId() string
		GetNodeId() string
	})
	h.order.add(fmt.Sprintf("ctrl:%s:%s", method, strings.TrimPrefix(r.GetVolumeId(), "ext-")))
	for _, n := range h.nodes {
		if n.csiID != r.GetNodeId() || h.statuses.get(n.id) == csi.NodeStatusGone {
			continue
		}
		if st, ok := n.fake.Volume(r.GetVolumeId()); ok && (len(st.Staged) > 0 || len(st.Published) > 0) {
			h.order.violate(fmt.Sprintf("ControllerUnpublishVolume of %s from %s while staged %d, published %d there",
				r.GetVolumeId(), n.id, len(st.Staged), len(st.Published)))
		}
	}
	return nil
}

// callOrder is the order in which teardown calls reached the plugins,
// across all of them: "<node>:<method>:<volume>" or
// "ctrl:<method>:<volume>".
type callOrder struct {
	mu         sync.Mutex
	calls      []string
	violations []string
}

func (o *callOrder) hook(node string) csitest.Hook {
	return func(_ context.Context, method string, req any) error {
		r := req.(interface{ GetVolumeId() string })
		o.add(fmt.Sprintf("%s:%s:%s", node, method, strings.TrimPrefix(r.GetVolumeId(), "ext-")))
		return nil
	}
}

func (o *callOrder) add(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, s)
}

func (o *callOrder) violate(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.violations = append(o.violations, s)
}

func (o *callOrder) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.calls)
}

func (o *callOrder) violationsList() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.violations)
}

// testNodes is the NodeDetacher: it runs the node step on the claim's
// node by calling that node's mounter, as the router's node endpoint
// would.
type testNodes struct{ h *harness }

var _ claimgc.NodeDetacher = testNodes{}

func (d testNodes) NodeDetach(ctx context.Context, vol *csi.Volume, claim *csi.Claim) error {
	n := d.h.nodes[claim.NodeID]
	if n == nil {
		return fmt.Errorf("%w: node %s has no agent", csi.ErrNodeNotReady, claim.NodeID)
	}
	return n.mounter.UnmountVolume(ctx, mounter.NewUnmountRequest(vol.Namespace, vol.ID, claim))
}

// testController is the ControllerDetacher: ControllerUnpublishVolume on
// the controller plugin over its socket.
type testController struct{ h *harness }

var _ claimgc.ControllerDetacher = testController{}

func (d testController) ControllerDetach(ctx context.Context, vol *csi.Volume, claim *csi.Claim) error {
	err := d.h.ctrlClient.ControllerUnpublishVolume(ctx, &plugin.ControllerUnpublishRequest{
		ExternalID: vol.ExternalID, ExternalNodeID: claim.ExternalNodeID, Secrets: vol.Secrets,
	})
	if csi.CodeOf(err) == csi.CodeNotFound {
		return nil
	}
	return err
}

// nodeStatuses is a map-based NodeStatuses.
type nodeStatuses struct {
	mu sync.Mutex
	m  map[string]csi.NodeStatus
}

var _ claimgc.NodeStatuses = (*nodeStatuses)(nil)

func (s *nodeStatuses) NodeStatus(_ context.Context, id string) (csi.NodeStatus, error) {
	return s.get(id), nil
}

func (s *nodeStatuses) get(id string) csi.NodeStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[id]
}

func (s *nodeStatuses) set(id string, st csi.NodeStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[id] = st
}

// registry is a node's plugin registry for its mounter; an unregistered
// plugin is csi.ErrPluginNotFound, as when the plugin task is not
// running.
type registry struct {
	mu         sync.Mutex
	client     *plugin.Client
	info       *csi.PluginInfo
	registered bool
}

var _ mounter.Plugins = (*registry)(nil)

func (r *registry) NodePlugin(id string) (plugin.NodeClient, *csi.PluginInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id != testPluginID || !r.registered {
		return nil, nil, fmt.Errorf("%w: node plugin %s is not running on this node", csi.ErrPluginNotFound, id)
	}
	return r.client, r.info, nil
}

func (r *registry) setRegistered(ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.registered = ok
}

// reset forgets the calls recorded so far.
func (o *callOrder) reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = nil
}
