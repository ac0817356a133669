package rpcshim

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/csikit/csikit/csi"
)

// InmemTransport is a Transport that calls node Handlers in the same
// process. Tests use it to wire a server and several nodes without
// sockets; single-process hosts use it in production. It behaves like the
// gRPC transport: the request and reply go through JSON, and a handler's
// error goes through EncodeError and WireError.Err, so a caller cannot
// tell the two apart by their results.
//
// All methods are safe for concurrent use. The zero value is not ready;
// use NewInmemTransport. Close refuses further calls and waits for the
// handler goroutines the transport started.
type InmemTransport struct {
	mu     sync.RWMutex
	nodes  map[string]*inmemNode
	closed bool
	// handlers counts the handler goroutines still running; Close
	// waits for them. Add happens under mu's read lock while closed is
	// false, so none starts once Close has set closed.
	handlers sync.WaitGroup
}

type inmemNode struct {
	h    Handler
	down bool
}

var _ Transport = (*InmemTransport)(nil)

// NewInmemTransport returns a transport with no nodes.
func NewInmemTransport() *InmemTransport {
	return &InmemTransport{nodes: make(map[string]*inmemNode)}
}

// Register makes h the endpoint of nodeID, replacing any earlier one (an
// agent restart). A node that was set down stays down. Register panics if
// h is nil, a programmer error better found here than in a call.
func (t *InmemTransport) Register(nodeID string, h Handler) {
	if h == nil {
		panic("rpcshim: InmemTransport.Register called with a nil Handler for node " + nodeID)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if n, ok := t.nodes[nodeID]; ok {
		n.h = h
		return
	}
	t.nodes[nodeID] = &inmemNode{h: h}
}

// Deregister forgets nodeID; later calls to it fail with
// csi.ErrNodeNotReady. Calls already running finish.
func (t *InmemTransport) Deregister(nodeID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.nodes, nodeID)
}

// SetDown simulates a partition: while down is true, calls to nodeID fail
// with csi.ErrNodeNotReady without reaching its handler. Calls already
// running finish. Setting an unregistered node down has no effect.
func (t *InmemTransport) SetDown(nodeID string, down bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n, ok := t.nodes[nodeID]; ok {
		n.down = down
	}
}

// Call implements Transport. The request and reply cross as JSON, as on
// the network, so caller and handler share no memory. A handler runs in
// its own goroutine so that Call returns when ctx ends even if the
// handler ignores ctx, as it would over gRPC; such a handler keeps
// running until it returns, and Close waits for it. The methods of a NodeEndpoint are the
// exception: they make only calls that end with ctx (the plugin
// client's, the Unmounter's), so they run on the caller's goroutine,
// which returns at ctx's end all the same. A method a node agent added
// to the endpoint's Mux runs in its own goroutine.
func (t *InmemTransport) Call(ctx context.Context, nodeID, method string, req, resp any) error {
	if err := csi.ValidateNodeID(nodeID); err != nil {
		return fmt.Errorf("rpcshim: call %s: %w", method, err)
	}
	// A request that does not encode is refused before anything else,
	// as on the wire.
	body, err := encodeRequest(nodeID, method, req)
	if err != nil {
		return err
	}
	h, err := t.endpoint(nodeID, method)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return ctxError(nodeID, method, err)
	}
	r := t.serve(ctx, h, method, body)
	switch {
	case r.closed:
		return t.closedError(nodeID, method)
	case r.aborted:
		return ctxError(nodeID, method, ctx.Err())
	case r.err != nil:
		if err := ctxEnded(ctx); err != nil {
			// Over gRPC the caller sees its own deadline, not what the
			// handler answered after it: do the same here.
			return ctxError(nodeID, method, err)
		}
		return EncodeError(r.err).Err()
	}
	return decodeReply(nodeID, method, r.body, resp)
}

// endpoint returns the Handler of nodeID, or the transport's error for a
// node it cannot reach.
func (t *InmemTransport) endpoint(nodeID, method string) (Handler, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	n, ok := t.nodes[nodeID]
	switch {
	case t.closed:
		return nil, t.closedError(nodeID, method)
	case !ok:
		return nil, fmt.Errorf("%w: node %s has no endpoint on the in-memory transport; call %s was not sent, retry once the node registers",
			csi.ErrNodeNotReady, nodeID, method)
	case n.down:
		return nil, fmt.Errorf("%w: node %s is set down on the in-memory transport; call %s was not sent, retry once it is back",
			csi.ErrNodeNotReady, nodeID, method)
	}
	return n.h, nil
}

// closedError is the error of a call made after Close: Retryable, the
// call was not sent (another transport, or a restarted host, may send
// it).
func (t *InmemTransport) closedError(nodeID, method string) error {
	return fmt.Errorf("%w: the in-memory transport is closed; call %s to node %s was not sent",
		csi.ErrUnavailable, method, nodeID)
}

// serve runs the handler: on the caller's goroutine when it returns soon
// after ctx ends by construction (a goroutine per call would only add a
// hand-off to each call), in a goroutine of its own otherwise.
func (t *InmemTransport) serve(ctx context.Context, h Handler, method string, body []byte) result {
	if ih, ok := h.(inlineHandler); ok && ih.servesInline(method) {
		b, err := h.ServeCall(ctx, method, body)
		return result{body: b, err: err}
	}
	t.mu.RLock()
	if t.closed {
		t.mu.RUnlock()
		return result{closed: true}
	}
	t.handlers.Add(1)
	t.mu.RUnlock()
	return serveAsync(ctx, h, method, body, t.handlers.Done)
}

// Close refuses every later call with an error matching
// csi.ErrUnavailable (Retryable, not sent) and waits for the handler
// goroutines the transport started to return, also those whose caller
// already returned at the end of its ctx: a handler that never returns
// keeps Close waiting. Calls a NodeEndpoint serves on the caller's
// goroutine end with their callers' ctx. Close may be called more than
// once; it always returns nil.
func (t *InmemTransport) Close() error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.handlers.Wait()
	return nil
}

// encodeRequest encodes a call's request as JSON.
func encodeRequest(nodeID, method string, req any) ([]byte, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("%w: call %s on node %s: encode request %T: %v; the call was not sent",
			csi.ErrInvalidRequest, method, nodeID, req, err)
	}
	return body, nil
}

// result is a handler's answer; aborted says ctx ended first, closed
// that the transport was closed before the handler started.
type result struct {
	body    []byte
	err     error
	aborted bool
	closed  bool
}

// serveAsync runs the handler in its own goroutine and waits for its
// answer or for the end of ctx, whichever comes first: a handler that
// ignores ctx keeps running, but the caller gets its answer at ctx's end,
// as over the network. returned is called when the handler returns.
func serveAsync(ctx context.Context, h Handler, method string, body []byte, returned func()) result {
	done := make(chan result, 1)
	go func() {
		defer returned()
		b, err := h.ServeCall(ctx, method, body)
		done <- result{body: b, err: err}
	}()
	select {
	case r := <-done:
		return r
	case <-ctx.Done():
		// A reply that raced with the end of ctx still counts.
		select {
		case r := <-done:
			return r
		default:
			return result{aborted: true}
		}
	}
}

// ctxEnded returns ctx's error, or context.DeadlineExceeded once its
// deadline has passed even if ctx has not noticed yet (its timer runs on
// another goroutine). A node's handler sees the same deadline rounded up
// (gRPC's grpc-timeout), so when it answers "deadline exceeded" the
// caller's deadline has passed too, and both transports report it as the
// caller's.
func ctxEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// ctxError reports a call cut short by its context: Uncertain, with
// ctx.Err() in the chain.
func ctxError(nodeID, method string, err error) error {
	return fmt.Errorf("rpcshim: call %s on node %s did not complete, it may or may not have run: %w", method, nodeID, err)
}

// decodeReply decodes a node's JSON reply into resp. A reply that does not
// decode means server and node disagree on the method's types; the call
// ran, so retrying does not help: Final.
func decodeReply(nodeID, method string, body []byte, resp any) error {
	if resp == nil || len(body) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, resp); err != nil {
		return &classedError{
			msg:   fmt.Sprintf("rpcshim: call %s on node %s ran but its reply does not decode into %T: %v; check that server and node run compatible csikit versions", method, nodeID, resp, err),
			class: csi.ClassFinal,
		}
	}
	return nil
}

// classedError is a transport error with an explicit class and no
// sentinel.
type classedError struct {
	msg   string
	class csi.Class
}

func (e *classedError) Error() string         { return e.msg }
func (e *classedError) ErrorClass() csi.Class { return e.class }

// InmemNodeStatuses is a NodeStatuses kept in a map, for tests and
// single-process hosts that know their nodes' liveness directly. Nodes
// never Set are NodeStatusUnknown. The zero value is ready to use; all
// methods are safe for concurrent use.
type InmemNodeStatuses struct {
	mu       sync.RWMutex
	statuses map[string]csi.NodeStatus
}

var _ NodeStatuses = (*InmemNodeStatuses)(nil)

// Set records the status of nodeID.
func (s *InmemNodeStatuses) Set(nodeID string, status csi.NodeStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.statuses == nil {
		s.statuses = make(map[string]csi.NodeStatus)
	}
	s.statuses[nodeID] = status
}

// NodeStatus implements NodeStatuses. It never fails.
func (s *InmemNodeStatuses) NodeStatus(_ context.Context, nodeID string) (csi.NodeStatus, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.statuses[nodeID], nil
}
