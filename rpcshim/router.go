package rpcshim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/state"
)

// RouterConfig configures a Router.
type RouterConfig struct {
	// Store is read for the controller instances of a plugin
	// (HealthyControllers, an index whose cost does not grow with the
	// nodes of the cluster, read again only when Index(TablePlugins)
	// moved) and, to explain a refusal, for the plugin's and a node's
	// records. Required.
	Store state.Reader
	// Transport carries the calls to the nodes. Required.
	Transport Transport
	// NodeStatuses says whether a node is ready. Required.
	NodeStatuses NodeStatuses
	// Logger gets a debug line per controller node passed over. Nil
	// means no logging. Requests are never logged.
	Logger hclog.Logger
}

// Router is csikit's ClientCSI router: it sends controller calls to a
// node that runs a healthy controller of the plugin, and node calls to
// the node that owns a claim. The server never talks to a plugin itself.
//
// # Choosing a controller node
//
// When a request names no ControllerNodeID, the candidates are the nodes
// whose controller instance of the plugin is healthy
// (state.Reader.HealthyControllers), in node ID order, except that the
// last node that served a call of that plugin successfully goes first
// (sticky, so a plugin's calls keep going to one warm controller while
// it works). Each candidate is checked with NodeStatuses when its turn
// comes: a node that is not ready is passed over without a call. A call
// that fails with a Retryable or Uncertain error (csi.IsRetryable: the
// node unreachable, csi.ErrPluginNotFound because the plugin is not
// running there any more, the plugin Unavailable) moves on to the next
// candidate; CSI controller calls are idempotent, so trying another
// instance after an uncertain one is safe. A Final error is returned at
// once, and so is the end of ctx. When no candidate is left, the error
// is a *NoControllerError (csi.ErrNoController, Retryable) listing why
// each node was passed over.
//
// When a request names a ControllerNodeID, that node must be known and
// ready (csi.ErrNodeNotFound, csi.ErrNodeNotReady) and run a healthy
// controller of the plugin (csi.ErrPluginNotFound,
// csi.ErrPluginUnhealthy); otherwise nothing is called. Its call's error
// is returned as it is, with no other node tried.
//
// # Attach and detach
//
// ControllerPublish and ControllerUnpublish calls for one plugin and one
// target node (the CSI node ID the volume is attached to or detached
// from) run one at a time, in arrival order; calls for other target
// nodes, or other plugins, run in parallel. See attachKey for why. A call
// waiting for its turn gives up when its ctx ends.
//
// All methods are safe for concurrent use. Requests are not changed and
// responses belong to the caller.
type Router struct {
	store     state.Reader
	transport Transport
	statuses  NodeStatuses
	logger    hclog.Logger

	locks keyedLocks[attachKey]

	mu     sync.Mutex
	sticky map[string]string       // plugin ID → node that last served it
	views  map[string]*controllers // plugin ID → its healthy controllers as last read
}

// controllers is a plugin's healthy controller instances as read from
// the store while the plugin table was at index. A routing decision
// reads only the plugin table's index as long as it has not moved: the
// instances and their fingerprints are copied from the store once per
// change of the table, not once per call. A view is shared by every
// call that uses it and never changed.
type controllers struct {
	index uint64
	// infos are the healthy controller instances, keyed by host node ID.
	infos map[string]*csi.PluginInfo
	// nodes are the keys of infos, sorted.
	nodes []string
}

// NewRouter validates cfg and returns a Router. It starts no goroutine.
func NewRouter(cfg RouterConfig) (*Router, error) {
	missing := func(field, what string) error {
		return fmt.Errorf("%w: rpcshim: RouterConfig.%s is nil; pass %s", csi.ErrInvalidRequest, field, what)
	}
	switch {
	case cfg.Store == nil:
		return nil, missing("Store", "the server's state.Reader (a *state.MemStore)")
	case cfg.Transport == nil:
		return nil, missing("Transport", "the transport to the nodes (GRPCTransport, InmemTransport or the host's own)")
	case cfg.NodeStatuses == nil:
		return nil, missing("NodeStatuses", "the host's view of its nodes' liveness")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Router{
		store:     cfg.Store,
		transport: cfg.Transport,
		statuses:  cfg.NodeStatuses,
		logger:    cfg.Logger,
		sticky:    make(map[string]string),
		views:     make(map[string]*controllers),
	}, nil
}

// RouterStats is a point-in-time view of the router's attach and detach
// serialization, for metrics.
type RouterStats struct {
	// AttachRunning is how many (plugin, target node) pairs have an
	// attach or detach call running.
	AttachRunning int
	// AttachWaiting is how many attach and detach calls wait for another
	// one to the same plugin and target node to finish.
	AttachWaiting int
}

// Stats returns the router's current figures.
func (r *Router) Stats() RouterStats {
	held, waiting := r.locks.stats()
	return RouterStats{AttachRunning: held, AttachWaiting: waiting}
}

// NoControllerError is returned when no node can serve a controller call
// of a plugin right now. It matches csi.ErrNoController and is Retryable.
type NoControllerError struct {
	// PluginID is the plugin whose controller was wanted.
	PluginID string
	// Method is the CSI method, for example "ControllerPublishVolume".
	Method string
	// PassedOver says why each controller node was not used, sorted by
	// node ID; empty when no node runs a controller of the plugin.
	PassedOver []PassedOver
}

// PassedOver is one controller node the router did not use, and why.
type PassedOver struct {
	NodeID string
	Reason string
}

func (e *NoControllerError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: plugin %s has no controller that can serve %s: ", csi.ErrNoController, e.PluginID, e.Method)
	if len(e.PassedOver) == 0 {
		b.WriteString("no node runs a controller instance of it; start the plugin's controller")
		return b.String()
	}
	for i, p := range e.PassedOver {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "node %s: %s", p.NodeID, p.Reason)
	}
	b.WriteString("; retry once a controller of the plugin is healthy on a ready node")
	return b.String()
}

// Unwrap returns csi.ErrNoController, which gives the error its class.
func (e *NoControllerError) Unwrap() error { return csi.ErrNoController }

// ControllerDetach implements claimgc.ControllerDetacher: it runs
// ControllerUnpublishVolume for vol.ExternalID and the claim's CSI node
// ID through a healthy controller of vol's plugin. A plugin answering
// NotFound means the volume is not attached there: done, nil.
//
// A claim without a CSI node ID is refused (csi.ErrInvalidRequest):
// ControllerUnpublish with no node would detach the volume from every
// node.
func (r *Router) ControllerDetach(ctx context.Context, vol *csi.Volume, claim *csi.Claim) error {
	if vol == nil || claim == nil {
		return fmt.Errorf("%w: rpcshim: ControllerDetach needs a volume and a claim", csi.ErrInvalidRequest)
	}
	if claim.ExternalNodeID == "" {
		return fmt.Errorf("%w: rpcshim: the claim of allocation %s on volume %s has no CSI node ID, so the node to detach from is unknown; nothing was called",
			csi.ErrInvalidRequest, claim.AllocationID, vol.ID)
	}
	_, err := r.ControllerUnpublish(ctx, &ControllerUnpublishRequest{
		CSIControllerQuery: CSIControllerQuery{PluginID: vol.PluginID},
		ControllerUnpublishRequest: plugin.ControllerUnpublishRequest{
			ExternalID:     vol.ExternalID,
			ExternalNodeID: claim.ExternalNodeID,
			Secrets:        vol.Secrets,
		},
	})
	if csi.TeardownDone(err) {
		return nil
	}
	return fmt.Errorf("controller detach of volume %s from node %s: %w", vol.ID, claim.NodeID, err)
}

// NodeDetach implements claimgc.NodeDetacher: it asks the claim's node
// to unpublish the volume for the claim's allocation, and unstage it if
// no other allocation there uses it (MethodNodeDetach, served by the
// node's mounter).
//
// The node must be ready. A node that is down, or that the host has no
// record of, gives an error matching csi.ErrNodeNotReady (Retryable); a
// node the host reports gone gives csi.ErrNodeNotFound (Final), because
// nothing on it can be reached any more. The claim release worker never
// gets that far for a gone node: it asks NodeStatuses first and skips
// the node step. Other errors are the node's, with their class.
func (r *Router) NodeDetach(ctx context.Context, vol *csi.Volume, claim *csi.Claim) error {
	if vol == nil || claim == nil {
		return fmt.Errorf("%w: rpcshim: NodeDetach needs a volume and a claim", csi.ErrInvalidRequest)
	}
	if err := csi.ValidateNodeID(claim.NodeID); err != nil {
		return fmt.Errorf("rpcshim: node detach of volume %s for allocation %s: %w", vol.ID, claim.AllocationID, err)
	}
	// Built on failure only: the success path of a release makes no
	// error text.
	what := func() string {
		return fmt.Sprintf("node detach of volume %s for allocation %s on node %s", vol.ID, claim.AllocationID, claim.NodeID)
	}
	st, err := r.statuses.NodeStatus(ctx, claim.NodeID)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %s: the host cannot tell whether the node is ready (%w); retry later", csi.ErrNodeNotReady, what(), err)
	case st == csi.NodeStatusGone:
		return fmt.Errorf("%w: %s: the node has left the cluster and cannot be reached; its node step needs no call",
			csi.ErrNodeNotFound, what())
	case st != csi.NodeStatusReady:
		return fmt.Errorf("%w: %s: the node is %s; retry once it is ready", csi.ErrNodeNotReady, what(), st)
	}
	if err := r.transport.Call(ctx, claim.NodeID, MethodNodeDetach, newNodeDetachRequest(vol, claim), nil); err != nil {
		return fmt.Errorf("%s: %w", what(), err)
	}
	return nil
}

// attachTarget is implemented by the requests the router serializes per
// target node.
type attachTarget interface {
	attachKey() attachKey
}

func (r *ControllerPublishRequest) attachKey() attachKey {
	return attachKey{pluginID: r.PluginID, externalNodeID: r.ExternalNodeID}
}

func (r *ControllerUnpublishRequest) attachKey() attachKey {
	return attachKey{pluginID: r.PluginID, externalNodeID: r.ExternalNodeID}
}

// callController routes one controller request: it copies req with
// ControllerNodeID set to each node it tries, and fills the response's
// ControllerNodeID with the node that served it.
func callController[Req, Resp any, PReq interface {
	*Req
	controllerRequest
}, PResp interface {
	*Resp
	controllerResponse
}](ctx context.Context, r *Router, method string, req PReq) (PResp, error) {
	op := strings.TrimPrefix(method, "ClientCSI.")
	if req == nil {
		return nil, fmt.Errorf("%w: rpcshim: %s with a nil request", csi.ErrInvalidRequest, op)
	}
	q := *req.query()
	if err := csi.ValidatePluginID(q.PluginID); err != nil {
		return nil, fmt.Errorf("rpcshim: %s: %w", op, err)
	}
	if q.ControllerNodeID != "" {
		if err := csi.ValidateNodeID(q.ControllerNodeID); err != nil {
			return nil, fmt.Errorf("rpcshim: %s for plugin %s: ControllerNodeID: %w", op, q.PluginID, err)
		}
	}
	if t, ok := any(req).(attachTarget); ok {
		key := t.attachKey()
		unlock, err := r.locks.lock(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("rpcshim: %s for plugin %s gave up waiting for another attach or detach to CSI node %q to finish: %w",
				op, q.PluginID, key.externalNodeID, err)
		}
		defer unlock()
	}

	var resp PResp
	call := func(ctx context.Context, nodeID string) error {
		fwd := *req
		PReq(&fwd).query().ControllerNodeID = nodeID
		out := PResp(new(Resp))
		if err := r.transport.Call(ctx, nodeID, method, PReq(&fwd), out); err != nil {
			return err
		}
		resp = out
		return nil
	}
	var node string
	var err error
	if q.ControllerNodeID != "" {
		node, err = r.callNamed(ctx, op, q, call)
	} else {
		node, err = r.callAny(ctx, op, q.PluginID, call)
	}
	if err != nil {
		return nil, err
	}
	resp.reply().ControllerNodeID = node
	return resp, nil
}

// callAny tries the plugin's healthy controller nodes in order until one
// serves the call.
func (r *Router) callAny(ctx context.Context, op, pluginID string, call func(context.Context, string) error) (string, error) {
	view, err := r.controllers(pluginID)
	if err != nil {
		if errors.Is(err, csi.ErrPluginNotFound) {
			r.forget(pluginID)
			return "", fmt.Errorf("%w: %s: plugin %s is not registered (no node reports it); start the plugin: %w",
				csi.ErrNoController, op, pluginID, err)
		}
		return "", fmt.Errorf("rpcshim: %s: read the controllers of plugin %s: %w", op, pluginID, err)
	}
	var passed []PassedOver
	var answered *answer
	r.mu.Lock()
	last := r.sticky[pluginID]
	r.mu.Unlock()
	if _, ok := view.infos[last]; !ok {
		last = ""
	}
	// The node that last served the plugin goes first, then the others
	// in node ID order.
	for i := -1; i < len(view.nodes); i++ {
		var node string
		switch {
		case i < 0 && last == "":
			continue
		case i < 0:
			node = last
		case view.nodes[i] == last:
			continue
		default:
			node = view.nodes[i]
		}
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("rpcshim: %s for plugin %s stopped before trying node %s: %w", op, pluginID, node, err)
		}
		if why := r.notReady(ctx, node); why != "" {
			r.logger.Debug("controller node passed over", "plugin_id", pluginID, "method", op, "node_id", node, "reason", why)
			passed = append(passed, PassedOver{NodeID: node, Reason: why})
			continue
		}
		err := call(ctx, node)
		if err == nil {
			if node != last {
				r.remember(pluginID, node)
			}
			return node, nil
		}
		if ctx.Err() != nil || !csi.IsRetryable(err) {
			return "", fmt.Errorf("rpcshim: %s by the controller of plugin %s on node %s: %w", op, pluginID, node, err)
		}
		why := err.Error()
		if errors.Is(err, csi.ErrPluginNotFound) {
			why = "plugin not found on node"
		}
		// An Uncertain answer is kept over a later "not now": the call it
		// reports may yet take effect, which the caller must know.
		if tookCall(err) && (answered == nil || csi.Classify(err) == csi.ClassUncertain) {
			answered = &answer{node: node, err: err}
		}
		r.logger.Debug("controller node failed, trying the next", "plugin_id", pluginID, "method", op, "node_id", node,
			"class", csi.Classify(err), "error", err)
		passed = append(passed, PassedOver{NodeID: node, Reason: why})
	}
	if answered != nil {
		return "", answered.error(op, pluginID, passed)
	}
	return "", r.noController(op, pluginID, view.infos, passed)
}

// tookCall reports whether a Retryable or Uncertain err from a
// controller node came from a controller that took the call: a call
// whose outcome is unknown (Uncertain: DeadlineExceeded, Canceled, a
// connection closed mid-call) or a plugin answering "not now" (Aborted,
// ResourceExhausted). Such a controller is there and may have acted, so
// the call's failure is not a case of csi.ErrNoController. A plugin
// answering Unavailable, a plugin missing on the node and a call that
// was never sent (node down or unreachable) did not take it.
func tookCall(err error) bool {
	if csi.Classify(err) == csi.ClassUncertain {
		return true
	}
	var rpcErr *csi.RPCError
	return errors.As(err, &rpcErr) && rpcErr.Code != csi.CodeUnavailable
}

// answer is the last error of a controller that took a call; when no
// other controller serves the call, it is what the caller gets, with
// its class (Uncertain for a timeout: the attach may yet happen).
type answer struct {
	node string
	err  error
}

func (a *answer) error(op, pluginID string, passed []PassedOver) error {
	var others strings.Builder
	for _, p := range passed {
		if p.NodeID != a.node {
			fmt.Fprintf(&others, "; node %s: %s", p.NodeID, p.Reason)
		}
	}
	return fmt.Errorf("rpcshim: %s by the controller of plugin %s on node %s did not complete (no other controller served it%s); retry the call: %w",
		op, pluginID, a.node, others.String(), a.err)
}

// controllers returns the plugin's healthy controllers, read from the
// store again only when the plugin table moved since the last read
// (state.Reader.HealthyControllers, whose cost grows with the plugin's
// controller instances only). The index is read before the instances,
// so a view is never older than the index it is kept under; a write in
// between makes the next call read again.
func (r *Router) controllers(pluginID string) (*controllers, error) {
	idx, err := r.store.Index(state.TablePlugins)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	v := r.views[pluginID]
	r.mu.Unlock()
	if v != nil && v.index == idx {
		return v, nil
	}
	infos, err := r.store.HealthyControllers(pluginID)
	if err != nil {
		if errors.Is(err, csi.ErrPluginNotFound) {
			r.mu.Lock()
			delete(r.views, pluginID)
			r.mu.Unlock()
		}
		return nil, err
	}
	// Kept even over a view of a higher index (a restore can move the
	// index back): a view is only ever used at its own index.
	v = &controllers{index: idx, infos: infos, nodes: slices.Sorted(maps.Keys(infos))}
	r.mu.Lock()
	r.views[pluginID] = v
	r.mu.Unlock()
	return v, nil
}

// healthyControllers returns the healthy controller instances of a
// plugin, keyed by host node ID, as the router sees them for its next
// call (see controllers). The map and its values are shared: the caller
// must not change them.
func (r *Router) healthyControllers(pluginID string) (map[string]*csi.PluginInfo, error) {
	v, err := r.controllers(pluginID)
	if err != nil {
		return nil, err
	}
	return v.infos, nil
}

func (r *Router) remember(pluginID, node string) {
	r.mu.Lock()
	r.sticky[pluginID] = node
	r.mu.Unlock()
}

func (r *Router) forget(pluginID string) {
	r.mu.Lock()
	delete(r.sticky, pluginID)
	r.mu.Unlock()
}

// notReady returns why node cannot take a call now, or "".
func (r *Router) notReady(ctx context.Context, node string) string {
	st, err := r.statuses.NodeStatus(ctx, node)
	switch {
	case err != nil:
		return "the host cannot tell whether it is ready: " + err.Error()
	case st != csi.NodeStatusReady:
		return "not ready (" + st.String() + ")"
	}
	return ""
}

// noController explains why no node could serve the call. The plugin
// read happens only here, on the failure path, to add the controllers
// that were not candidates because they are unhealthy.
func (r *Router) noController(op, pluginID string, healthy map[string]*csi.PluginInfo, passed []PassedOver) error {
	if p, err := r.store.Plugin(pluginID); err == nil {
		for node, info := range p.Controllers {
			if _, ok := healthy[node]; ok || info.Healthy {
				continue
			}
			why := "controller unhealthy"
			if info.HealthDescription != "" {
				why += ": " + info.HealthDescription
			}
			passed = append(passed, PassedOver{NodeID: node, Reason: why})
		}
	}
	slices.SortFunc(passed, func(a, b PassedOver) int { return strings.Compare(a.NodeID, b.NodeID) })
	return &NoControllerError{PluginID: pluginID, Method: op, PassedOver: passed}
}

// callNamed checks the node the request names and calls only it.
func (r *Router) callNamed(ctx context.Context, op string, q CSIControllerQuery, call func(context.Context, string) error) (string, error) {
	node := q.ControllerNodeID
	if err := r.checkNamed(ctx, op, q.PluginID, node); err != nil {
		return "", err
	}
	if err := call(ctx, node); err != nil {
		return "", fmt.Errorf("rpcshim: %s by the controller of plugin %s on node %s: %w", op, q.PluginID, node, err)
	}
	r.remember(q.PluginID, node)
	return node, nil
}

// checkNamed verifies that node is known, ready and runs a healthy
// controller of the plugin.
func (r *Router) checkNamed(ctx context.Context, op, pluginID, node string) error {
	what := fmt.Sprintf("%s for plugin %s on node %s", op, pluginID, node)
	st, err := r.statuses.NodeStatus(ctx, node)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %s: the host cannot tell whether the node is ready (%w); retry later", csi.ErrNodeNotReady, what, err)
	case st == csi.NodeStatusUnknown || st == csi.NodeStatusGone:
		return fmt.Errorf("%w: %s: the host reports the node %s; name a node that runs a controller of the plugin, or leave ControllerNodeID empty",
			csi.ErrNodeNotFound, what, st)
	case st != csi.NodeStatusReady:
		return fmt.Errorf("%w: %s: the node is %s; retry once it is ready, or leave ControllerNodeID empty to use another controller",
			csi.ErrNodeNotReady, what, st)
	}
	ctrls, err := r.healthyControllers(pluginID)
	if err != nil {
		return fmt.Errorf("rpcshim: %s: %w", what, err)
	}
	if _, ok := ctrls[node]; ok {
		return nil
	}
	n, err := r.store.Node(node)
	switch {
	case errors.Is(err, csi.ErrNodeNotFound):
		return fmt.Errorf("%w: %s: the node has reported no plugins, so it runs no controller of the plugin", csi.ErrPluginNotFound, what)
	case err != nil:
		return fmt.Errorf("rpcshim: %s: %w", what, err)
	}
	in := n.ControllerInstance(pluginID)
	switch {
	case in == nil:
		return fmt.Errorf("%w: %s: the node runs no controller instance of the plugin; name another node or leave ControllerNodeID empty",
			csi.ErrPluginNotFound, what)
	case !in.Healthy:
		return fmt.Errorf("%w: %s: the node's controller instance is unhealthy (%s); retry once it recovers or leave ControllerNodeID empty",
			csi.ErrPluginUnhealthy, what, in.HealthDescription)
	}
	// Healthy in the node record but not in the index read just before:
	// a fingerprint landed in between. Trust the newer read.
	return nil
}
