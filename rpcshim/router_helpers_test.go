package rpcshim_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// The router tests run a real store, a real Router and the in-memory
// transport; only the nodes' answers are scripted (rtNode), because what
// is under test is which node the router calls and what it makes of the
// answer. The node endpoint with real plugins is tested on its own and
// end to end.

const rtPlugin = "p1"

// rtStatuses is the host's view of its nodes, with a way to make a
// lookup fail.
type rtStatuses struct {
	rpcshim.InmemNodeStatuses
	mu   sync.Mutex
	errs map[string]error
}

func (s *rtStatuses) fail(nodeID string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.errs == nil {
		s.errs = make(map[string]error)
	}
	s.errs[nodeID] = err
}

func (s *rtStatuses) NodeStatus(ctx context.Context, nodeID string) (csi.NodeStatus, error) {
	s.mu.Lock()
	err := s.errs[nodeID]
	s.mu.Unlock()
	if err != nil {
		return csi.NodeStatusUnknown, err
	}
	return s.InmemNodeStatuses.NodeStatus(ctx, nodeID)
}

// rtCluster is a server with a store, node statuses and scripted nodes.
type rtCluster struct {
	t        testing.TB
	store    *state.MemStore
	applier  *state.LocalApplier
	statuses *rtStatuses
	tr       *rpcshim.InmemTransport
	router   *rpcshim.Router

	mu    sync.Mutex
	nodes map[string]*rtNode
	calls []string // "node method", in arrival order
}

func newRTCluster(t testing.TB) *rtCluster {
	t.Helper()
	store, err := state.NewMemStore(state.Config{})
	must(t, err)
	c := &rtCluster{
		t:        t,
		store:    store,
		applier:  state.NewLocalApplier(store),
		statuses: &rtStatuses{},
		tr:       rpcshim.NewInmemTransport(),
		nodes:    make(map[string]*rtNode),
	}
	c.router, err = rpcshim.NewRouter(rpcshim.RouterConfig{Store: store, Transport: c.tr, NodeStatuses: c.statuses})
	must(t, err)
	return c
}

func (c *rtCluster) apply(cmd state.Command) state.Result {
	c.t.Helper()
	res, err := c.applier.Apply(context.Background(), cmd)
	must(c.t, err)
	return res
}

var rtTime = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// rtNodeInstance is a healthy node instance of rtPlugin on node, so the
// plugin exists whatever its controllers do.
func rtNodeInstance(node string) csi.PluginInfo {
	return csi.PluginInfo{
		PluginID: rtPlugin, Type: csi.PluginTypeNode, Healthy: true, UpdateTime: rtTime,
		Provider: "fake.csikit.io", RequiresController: true,
		NodeInfo: &csi.NodeInfo{ID: "csi-" + node},
	}
}

// rtControllerInstance is a controller instance of rtPlugin that
// advertises PUBLISH_UNPUBLISH_VOLUME.
func rtControllerInstance(healthy bool, desc string) csi.PluginInfo {
	return csi.PluginInfo{
		PluginID: rtPlugin, Type: csi.PluginTypeController, Healthy: healthy, HealthDescription: desc, UpdateTime: rtTime,
		Provider: "fake.csikit.io", RequiresController: true,
		ControllerInfo: &csi.ControllerInfo{Capabilities: csi.ControllerCapabilities{PublishUnpublishVolume: true}},
	}
}

// node makes id a ready node with a node instance of the plugin and a
// scripted endpoint.
func (c *rtCluster) node(id string) *rtNode {
	c.t.Helper()
	c.apply(state.UpsertNodePlugins{NodeID: id, Plugins: []csi.PluginInfo{rtNodeInstance(id)}})
	return c.serve(id)
}

// controller makes id a ready node running a node instance and a
// controller instance of the plugin, healthy or not, with a scripted
// endpoint.
func (c *rtCluster) controller(id string, healthy bool, desc string) *rtNode {
	c.t.Helper()
	c.apply(state.UpsertNodePlugins{NodeID: id, Plugins: []csi.PluginInfo{rtNodeInstance(id), rtControllerInstance(healthy, desc)}})
	return c.serve(id)
}

func (c *rtCluster) serve(id string) *rtNode {
	c.statuses.Set(id, csi.NodeStatusReady)
	n := &rtNode{id: id, c: c}
	c.mu.Lock()
	c.nodes[id] = n
	c.mu.Unlock()
	m := rpcshim.NewMux()
	rpcshim.Handle(m, rpcshim.MethodControllerPublish, func(ctx context.Context, req *rpcshim.ControllerPublishRequest) (*rpcshim.ControllerPublishResponse, error) {
		if err := n.answer(ctx, rpcshim.MethodControllerPublish, req); err != nil {
			return nil, err
		}
		return &rpcshim.ControllerPublishResponse{PublishContext: map[string]string{"served-by": id, "for": req.ExternalNodeID}}, nil
	})
	rpcshim.Handle(m, rpcshim.MethodControllerUnpublish, func(ctx context.Context, req *rpcshim.ControllerUnpublishRequest) (*rpcshim.ControllerUnpublishResponse, error) {
		return &rpcshim.ControllerUnpublishResponse{}, n.answer(ctx, rpcshim.MethodControllerUnpublish, req)
	})
	rpcshim.Handle(m, rpcshim.MethodNodeDetach, func(ctx context.Context, req *rpcshim.NodeDetachRequest) (*rpcshim.NodeDetachResponse, error) {
		return &rpcshim.NodeDetachResponse{}, n.answer(ctx, rpcshim.MethodNodeDetach, req)
	})
	c.tr.Register(id, m)
	return n
}

// called returns the "node method" log and clears it.
func (c *rtCluster) called() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = nil
	return out
}

// publish asks the router to attach vol-1 to the CSI node of host node
// target (default n9), naming controllerNode if not "".
func (c *rtCluster) publish(ctx context.Context, controllerNode string) (*rpcshim.ControllerPublishResponse, error) {
	return c.router.ControllerPublish(ctx, rtPublishRequest(controllerNode, "csi-n9"))
}

func rtPublishRequest(controllerNode, csiNode string) *rpcshim.ControllerPublishRequest {
	r := &rpcshim.ControllerPublishRequest{}
	r.PluginID = rtPlugin
	r.ControllerNodeID = controllerNode
	r.ExternalID = "vol-1"
	r.ExternalNodeID = csiNode
	r.Capability = csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	r.Secrets = csi.Secrets{"token": "s3cr3t"}
	return r
}

// rtNode is a scripted node endpoint: each call is logged, then answered
// with the next queued error (or success), after waiting for gate if set.
type rtNode struct {
	id string
	c  *rtCluster

	mu    sync.Mutex
	next  []error
	gate  chan struct{}
	reqs  []any
	enter chan string // if set, gets the method of each call as it arrives
}

// failNext queues answers; nil entries succeed.
func (n *rtNode) failNext(errs ...error) *rtNode {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.next = append(n.next, errs...)
	return n
}

func (n *rtNode) answer(ctx context.Context, method string, req any) error {
	n.c.mu.Lock()
	n.c.calls = append(n.c.calls, n.id+" "+method)
	n.c.mu.Unlock()
	n.mu.Lock()
	n.reqs = append(n.reqs, req)
	var err error
	if len(n.next) > 0 {
		err, n.next = n.next[0], n.next[1:]
	}
	gate, enter := n.gate, n.enter
	n.mu.Unlock()
	if enter != nil {
		enter <- method
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

func (n *rtNode) requests() []any {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]any(nil), n.reqs...)
}

// Errors a node answers with.
var (
	rtNotFound    = &csi.RPCError{Method: "ControllerPublishVolume", Code: csi.CodeNotFound, Message: "no such volume"}
	rtInvalid     = &csi.RPCError{Method: "ControllerPublishVolume", Code: csi.CodeInvalidArgument, Message: "bad capability"}
	rtUnavailable = &csi.RPCError{Method: "ControllerPublishVolume", Code: csi.CodeUnavailable, Message: "backend busy"}
	rtDeadline    = &csi.RPCError{Method: "ControllerPublishVolume", Code: csi.CodeDeadlineExceeded, Message: "attach timed out"}
)

func rtPluginMissing(node string) error {
	return &wrapped{msg: "no controller plugin \"p1\" is registered on node " + node, err: csi.ErrPluginNotFound}
}

// wrapped is an error with its own text around a sentinel.
type wrapped struct {
	msg string
	err error
}

func (w *wrapped) Error() string { return w.err.Error() + ": " + w.msg }
func (w *wrapped) Unwrap() error { return w.err }

// yield lets other goroutines run while a test waits for a state it
// cannot be signalled about.
func yield() { runtime.Gosched() }
