package health_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/health"
	"github.com/csikit/csikit/state"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

const (
	ns    = "default"
	pid   = "fake"
	grace = 5 * time.Minute
	wait  = 10 * time.Second // real-time bound on waiting for Run
)

var fsSNW = csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}

// countingApplier counts the commands handed over, by kind.
type countingApplier struct {
	state.Applier
	mu sync.Mutex
	n  map[state.Kind]int
}

func (a *countingApplier) Apply(ctx context.Context, cmd state.Command) (state.Result, error) {
	a.mu.Lock()
	a.n[cmd.Kind()]++
	a.mu.Unlock()
	return a.Applier.Apply(ctx, cmd)
}

func (a *countingApplier) total() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, c := range a.n {
		n += c
	}
	return n
}

type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// harness: plugin "fake", a csitest monolith reached over a real unix
// socket through plugin.Client, with node instances on n1 (CSI node
// csi-n1, the fake's own node) and n2 (csi-n2), a controller on n1, and
// allocations a1 on n1 and a2 on n2.
type harness struct {
	t       testing.TB
	store   *state.MemStore
	applier *countingApplier
	clock   *clock.Fake
	fake    *csitest.Plugin
	client  *plugin.Client
	caps    csi.ControllerCapabilities
	events  chan health.Event
	logs    *logBuffer
	// paths are where the test staged each external volume on n1.
	paths map[string]string
	// wrap, if set, wraps the Store the Monitor reads.
	wrap func(health.Store) health.Store
	m    *health.Monitor
}

type options struct {
	ctrl     csi.ControllerCapabilities
	node     csi.NodeCapabilities
	pageSize int32
	wrap     func(h *harness, s health.Store) health.Store
	sink     metrics.Sink
}

func newHarness(t testing.TB, o options) *harness {
	t.Helper()
	h := &harness{t: t, clock: clock.NewFake(t0), events: make(chan health.Event, 256), logs: &logBuffer{}, paths: map[string]string{}, caps: o.ctrl}
	h.fake = csitest.Start(t, csitest.Config{Controller: o.ctrl, Node: o.node, NodeID: "csi-n1", VolumeStatus: csitest.StatusWithCondition})
	c, err := plugin.New(plugin.Config{Endpoint: h.fake.Endpoint(), MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h.client = c
	st, err := state.NewMemStore(state.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h.store = st
	h.applier = &countingApplier{Applier: state.NewLocalApplier(st), n: map[state.Kind]int{}}
	nodeInfo := func(csiID string) csi.PluginInfo {
		return csi.PluginInfo{PluginID: pid, Type: csi.PluginTypeNode, Healthy: true, UpdateTime: t0, RequiresController: true,
			NodeInfo: &csi.NodeInfo{ID: csiID, Capabilities: o.node}}
	}
	ctrl := csi.PluginInfo{PluginID: pid, Type: csi.PluginTypeController, Healthy: true, UpdateTime: t0, RequiresController: true,
		ControllerInfo: &csi.ControllerInfo{Capabilities: o.ctrl}}
	h.apply(state.UpsertAllocations{Allocations: []csi.Allocation{{ID: "a1", Namespace: ns, NodeID: "n1"}, {ID: "a2", Namespace: ns, NodeID: "n2"}}})
	h.apply(state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{ctrl, nodeInfo("csi-n1")}})
	h.apply(state.UpsertNodePlugins{NodeID: "n2", Plugins: []csi.PluginInfo{nodeInfo("csi-n2")}})

	ctrls := health.ControllerFuncs{
		List: func(ctx context.Context, _ string, r *plugin.ListVolumesRequest) (*plugin.ListVolumesResponse, error) {
			return c.ListVolumes(ctx, r)
		},
		Get: func(ctx context.Context, _ string, r *plugin.ControllerGetVolumeRequest) (*plugin.ControllerGetVolumeResponse, error) {
			return c.ControllerGetVolume(ctx, r)
		},
		Unpublish: func(ctx context.Context, _ string, r *plugin.ControllerUnpublishRequest) error {
			return c.ControllerUnpublishVolume(ctx, r)
		},
	}
	nodes := health.NodeFunc(func(ctx context.Context, nodeID string, v *csi.Volume) (*plugin.VolumeStats, error) {
		path := h.paths[v.ExternalID]
		if nodeID != "n1" || path == "" {
			return nil, &csi.RPCError{Method: "NodeGetVolumeStats", Code: csi.CodeNotFound, Message: "not here"}
		}
		return c.NodeGetVolumeStats(ctx, &plugin.NodeVolumeStatsRequest{ExternalID: v.ExternalID, VolumePath: path, StagingPath: path})
	})
	var store health.Store = st
	if o.wrap != nil {
		store = o.wrap(h, st)
	}
	h.m, err = health.New(health.Config{
		Store: store, Applier: h.applier, Controllers: ctrls, Nodes: nodes,
		Interval: time.Minute, PageSize: o.pageSize, LeakGrace: grace, Clock: h.clock,
		Observer:   health.ObserverFunc(func(e health.Event) { h.events <- e }),
		Logger:     hclog.New(&hclog.LoggerOptions{Output: h.logs, Level: hclog.Info}),
		MetricSink: o.sink,
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *harness) apply(cmd state.Command) state.Result {
	h.t.Helper()
	res, err := state.NewLocalApplier(h.store).Apply(context.Background(), cmd)
	if err != nil {
		h.t.Fatalf("apply %s: %v", cmd.Kind(), err)
	}
	return res
}

// volume registers volume id (external "ext-<id>") and adds it to the fake.
func (h *harness) volume(id string) {
	h.t.Helper()
	h.fake.AddVolume("ext-"+id, 100, nil)
	h.apply(state.RegisterVolume{Volume: csi.Volume{ID: id, Namespace: ns, ExternalID: "ext-" + id, PluginID: pid, Capabilities: []csi.Capability{fsSNW}}})
}

// claim claims id for alloc on node and, like the claim flow, publishes
// it on the fake and records it attached.
func (h *harness) claim(id, alloc, node string) {
	h.t.Helper()
	h.apply(state.ClaimVolume{Namespace: ns, VolumeID: id, Claim: csi.Claim{AllocationID: alloc, NodeID: node, Mode: csi.ClaimWrite,
		AccessMode: fsSNW.AccessMode, AttachmentMode: fsSNW.AttachmentMode}})
	if h.caps.PublishUnpublishVolume {
		if _, err := h.client.ControllerPublishVolume(context.Background(), &plugin.ControllerPublishRequest{
			ExternalID: "ext-" + id, ExternalNodeID: "csi-" + node, Capability: fsSNW}); err != nil {
			h.t.Fatal(err)
		}
	}
	h.apply(state.AttachVolume{Namespace: ns, VolumeID: id, NodeID: node})
}

func (h *harness) pass() {
	h.t.Helper()
	if err := h.m.Pass(context.Background()); err != nil {
		h.t.Fatalf("Pass: %v", err)
	}
}

func (h *harness) health(id string) *state.VolumeHealth {
	h.t.Helper()
	got, err := h.store.Health(ns, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return got
}

func (h *harness) volumeRec(id string) *csi.Volume {
	h.t.Helper()
	v, err := h.store.Volume(ns, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return v
}

// drain returns the events emitted so far.
func (h *harness) drain() []health.Event {
	var out []health.Event
	for {
		select {
		case e := <-h.events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func kinds(evs []health.Event) string {
	var s []string
	for _, e := range evs {
		s = append(s, e.Kind.String()+":"+e.VolumeID+"@"+e.NodeID)
	}
	return strings.Join(s, " ")
}
