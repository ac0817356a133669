package rpcshim

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi"
)

// The gRPC service a node agent serves and the server calls. It is
// written by hand: one unary method whose messages are JSON envelopes, so
// the package needs no generated protobuf code.
const (
	// NodeServiceName is the full name of the node service.
	NodeServiceName = "csikit.rpcshim.v1.Node"
	// nodeCallMethod is the full gRPC method name of the one call.
	nodeCallMethod = "/" + NodeServiceName + "/Call"
	// codecName is the content-subtype callers send
	// ("application/grpc+csikit-json").
	codecName = "csikit-json"
)

// callRequest is the request envelope: the rpcshim method and its
// JSON-encoded request.
type callRequest struct {
	Method string          `json:"method"`
	Body   json.RawMessage `json:"body,omitempty"`
}

// callReply is the reply envelope: the JSON-encoded reply, or the
// handler's error. A handler error travels here, not as a gRPC status, so
// a non-OK status always means the transport itself failed.
type callReply struct {
	Body  json.RawMessage `json:"body,omitempty"`
	Error *WireError      `json:"error,omitempty"`
}

// codec encodes the envelopes as JSON and hands every other message to
// gRPC's protobuf codec. It is passed explicitly (ForceCodecV2 on each
// call, ForceServerCodecV2 on the server) and never registered globally.
// The protobuf fallback lets a host serve the node service on a
// *grpc.Server it shares with protobuf services (health, its own RPCs):
// a forced server codec applies to every service of that server.
type codec struct{ proto encoding.CodecV2 }

var _ encoding.CodecV2 = codec{}

func newCodec() codec { return codec{proto: encoding.GetCodecV2(protocodec.Name)} }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	switch v.(type) {
	case *callRequest, *callReply:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	if c.proto == nil {
		return nil, fmt.Errorf("rpcshim codec: cannot marshal %T", v)
	}
	return c.proto.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	switch v.(type) {
	case *callRequest, *callReply:
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		defer buf.Free()
		// json.RawMessage fields copy what they keep, so freeing buf
		// afterwards is safe.
		return json.Unmarshal(buf.ReadOnlyData(), v)
	}
	if c.proto == nil {
		return fmt.Errorf("rpcshim codec: cannot unmarshal %T", v)
	}
	return c.proto.Unmarshal(data, v)
}

func (codec) Name() string { return codecName }

// ServerCodecOption is the grpc.ServerOption a *grpc.Server needs to serve
// the node service (GRPCNodeServer.Register). It forces the package's
// codec on the whole server; that codec still encodes protobuf messages
// with gRPC's protobuf codec, so other services on the same server keep
// working. GRPCNodeServer.Serve adds it itself.
func ServerCodecOption() grpc.ServerOption { return grpc.ForceServerCodecV2(newCodec()) }

// nodeService is the HandlerType of the service description: what
// grpc.Server.RegisterService checks the implementation against.
type nodeService interface {
	serveEnvelope(ctx context.Context, req *callRequest) *callReply
}

func nodeServiceDesc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: NodeServiceName,
		HandlerType: (*nodeService)(nil),
		Methods:     []grpc.MethodDesc{{MethodName: "Call", Handler: handleNodeCall}},
		Metadata:    "rpcshim/grpc_transport.go",
	}
}

// handleNodeCall decodes the envelope and runs it through the server's
// unary interceptor, if any, like generated code does.
func handleNodeCall(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	req := new(callRequest)
	if err := dec(req); err != nil {
		return nil, err
	}
	svc := srv.(nodeService)
	if interceptor == nil {
		return svc.serveEnvelope(ctx, req), nil
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: nodeCallMethod}
	return interceptor(ctx, req, info, func(ctx context.Context, req any) (any, error) {
		return svc.serveEnvelope(ctx, req.(*callRequest)), nil
	})
}

// GRPCNodeServerConfig configures a GRPCNodeServer.
type GRPCNodeServerConfig struct {
	// Handler serves the calls, usually the node's Mux. Required.
	Handler Handler
	// Logger gets a debug line per failed call. Nil means no logging.
	Logger hclog.Logger
	// ServerOptions are added by Serve to the *grpc.Server it creates,
	// after ServerCodecOption and the TLS credentials.
	ServerOptions []grpc.ServerOption

	// The server's identity: every call must carry it, or it is
	// refused with csi.ErrPermissionDenied before the Handler runs (and
	// logged at Warn with the caller's address, never a credential).
	// Set TLS, ClusterToken or both, or Insecure.

	// TLS is the node's certificate (Certificates or GetCertificate)
	// and ClientCAs, the CA that signs the servers' client
	// certificates: mutual TLS, the preferred choice. Serve requires
	// and verifies a client certificate on every connection.
	TLS *tls.Config
	// ClusterToken is a random per-cluster secret the servers send in
	// metadata (GRPCTransportConfig.ClusterToken), at least
	// MinClusterTokenLen bytes. Without TLS it suits a unix socket or
	// loopback only.
	ClusterToken string
	// Insecure accepts calls from any process that can reach the
	// listener: for tests, and development on a private socket.
	Insecure bool
}

// GRPCNodeServer is a node agent's side of the gRPC transport: it serves
// NodeServiceName with a Handler. Either call Serve, which runs its own
// *grpc.Server, or Register it on a server the host already runs (built
// with ServerCodecOption).
type GRPCNodeServer struct {
	h       Handler
	logger  hclog.Logger
	options []grpc.ServerOption
	guard   nodeGuard
}

var _ nodeService = (*GRPCNodeServer)(nil)

// NewGRPCNodeServer validates cfg and returns a server. It starts nothing.
func NewGRPCNodeServer(cfg GRPCNodeServerConfig) (*GRPCNodeServer, error) {
	if cfg.Handler == nil {
		return nil, fmt.Errorf("%w: GRPCNodeServerConfig.Handler is nil; pass the node's Mux", csi.ErrInvalidRequest)
	}
	g, err := cfg.guard()
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	opts := []grpc.ServerOption{ServerCodecOption()}
	if cfg.TLS != nil {
		opts = append(opts, serverTLSOption(cfg.TLS))
	}
	return &GRPCNodeServer{h: cfg.Handler, logger: cfg.Logger, options: append(opts, cfg.ServerOptions...), guard: g}, nil
}

// Register adds the node service to r, typically a *grpc.Server created
// with ServerCodecOption. Without that option every call fails with
// codes.Internal or codes.Unimplemented on the server's side.
func (s *GRPCNodeServer) Register(r grpc.ServiceRegistrar) {
	r.RegisterService(nodeServiceDesc(), s)
}

// Serve serves the node service on lis until ctx ends, then stops the
// server: running calls are cancelled (their callers see a Retryable or
// Uncertain error) and lis is closed. It returns nil when stopped by ctx,
// or the error that made the gRPC server fail.
func (s *GRPCNodeServer) Serve(ctx context.Context, lis net.Listener) error {
	if lis == nil {
		return fmt.Errorf("%w: GRPCNodeServer.Serve needs a listener (a unix socket or a TCP address)", csi.ErrInvalidRequest)
	}
	gs := grpc.NewServer(s.options...)
	s.Register(gs)
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	select {
	case <-ctx.Done():
		gs.Stop()
		<-errc
		return nil
	case err := <-errc:
		gs.Stop()
		return fmt.Errorf("rpcshim: node gRPC server on %s stopped: %w", lis.Addr(), err)
	}
}

func (s *GRPCNodeServer) serveEnvelope(ctx context.Context, req *callRequest) *callReply {
	if err := s.guard.check(ctx); err != nil {
		s.logger.Warn("refused a node call without the server's identity", "method", req.Method, "peer", peerAddr(ctx), "error", err)
		return &callReply{Error: EncodeError(err)}
	}
	body, err := s.h.ServeCall(ctx, req.Method, req.Body)
	if err != nil {
		w := EncodeError(err)
		s.logger.Debug("node call failed", "method", req.Method, "class", w.Class, "error", w.Message)
		return &callReply{Error: w}
	}
	return &callReply{Body: body}
}

// GRPCTransportConfig configures a GRPCTransport.
type GRPCTransportConfig struct {
	// Resolve returns the gRPC target of a node's agent: "unix:///path"
	// for a unix socket, "host:port" for TCP. Required. It is called on
	// every Call, so it should be a cheap lookup in the host's node
	// records; when it returns a new target for a node, the transport
	// replaces that node's connection. An unknown or unreachable node
	// should be an error matching csi.ErrNodeNotReady; the transport
	// returns Resolve's errors wrapped, keeping their class.
	Resolve func(ctx context.Context, nodeID string) (target string, err error)
	// Logger gets a debug line when a node connection is opened, replaced
	// or closed. Nil means no logging.
	Logger hclog.Logger
	// DialOptions are added to every connection after the transport's
	// defaults (the identity's credentials, reconnect backoff capped at
	// DefaultReconnectMaxDelay), so they override them.
	DialOptions []grpc.DialOption

	// The server's identity, which the nodes' GRPCNodeServers check:
	// set TLS, ClusterToken or both, or Insecure.

	// TLS is the server's client certificate (Certificates) and
	// RootCAs, the CA that signs the nodes' certificates: mutual TLS,
	// the preferred choice. Set ServerName when the nodes' certificates
	// do not name the address they are dialled at (a unix socket).
	TLS *tls.Config
	// ClusterToken is sent in metadata with every call
	// (GRPCNodeServerConfig.ClusterToken), at least MinClusterTokenLen
	// bytes. Without TLS it travels in clear: unix sockets and loopback
	// only.
	ClusterToken string
	// Insecure sends calls without credentials: for tests, and
	// development on a private socket.
	Insecure bool
}

// DefaultReconnectMaxDelay caps the wait between reconnection attempts to
// a node. gRPC's own default (two minutes) would keep failing calls to a
// restarted agent long after it is back; five seconds matches the pace of
// the callers' own retry loops.
const DefaultReconnectMaxDelay = 5 * time.Second

// GRPCTransport is a Transport that calls node agents' GRPCNodeServers
// over gRPC. It keeps one *grpc.ClientConn per node, opened on the first
// call to it. All methods are safe for concurrent use; Close releases the
// connections.
type GRPCTransport struct {
	resolve  func(ctx context.Context, nodeID string) (string, error)
	logger   hclog.Logger
	dialOpts []grpc.DialOption
	callOpts []grpc.CallOption

	mu     sync.Mutex
	closed bool
	conns  map[string]*nodeConn
}

type nodeConn struct {
	target string
	cc     *grpc.ClientConn
}

var _ Transport = (*GRPCTransport)(nil)

// NewGRPCTransport validates cfg and returns a transport. It dials
// nothing and starts no goroutine until the first Call.
func NewGRPCTransport(cfg GRPCTransportConfig) (*GRPCTransport, error) {
	if cfg.Resolve == nil {
		return nil, fmt.Errorf("%w: GRPCTransportConfig.Resolve is nil; pass a function that returns a node's gRPC target", csi.ErrInvalidRequest)
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	opts, err := cfg.dialIdentity()
	if err != nil {
		return nil, err
	}
	bo := grpcbackoff.DefaultConfig
	bo.MaxDelay = DefaultReconnectMaxDelay
	opts = append(opts, grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo}))
	opts = append(opts, cfg.DialOptions...)
	return &GRPCTransport{
		resolve:  cfg.Resolve,
		logger:   cfg.Logger,
		dialOpts: opts,
		callOpts: []grpc.CallOption{grpc.ForceCodecV2(newCodec())},
		conns:    make(map[string]*nodeConn),
	}, nil
}

// Call implements Transport.
func (t *GRPCTransport) Call(ctx context.Context, nodeID, method string, req, resp any) error {
	if err := csi.ValidateNodeID(nodeID); err != nil {
		return fmt.Errorf("rpcshim: call %s: %w", method, err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("%w: call %s on node %s: encode request %T: %v; the call was not sent",
			csi.ErrInvalidRequest, method, nodeID, req, err)
	}
	if err := ctx.Err(); err != nil {
		return ctxError(nodeID, method, err)
	}
	cc, err := t.conn(ctx, nodeID, method)
	if err != nil {
		return err
	}
	var reply callReply
	if err := cc.Invoke(ctx, nodeCallMethod, &callRequest{Method: method, Body: body}, &reply, t.callOpts...); err != nil {
		return callError(ctx, nodeID, method, err)
	}
	if reply.Error != nil {
		if err := ctxEnded(ctx); err != nil {
			// Same rule as InmemTransport: an error that comes back
			// after the caller's deadline reports the deadline.
			return ctxError(nodeID, method, err)
		}
		return reply.Error.Err()
	}
	return decodeReply(nodeID, method, reply.Body, resp)
}

// conn returns the connection to nodeID's current target, opening it or
// replacing a stale one.
func (t *GRPCTransport) conn(ctx context.Context, nodeID, method string) (*grpc.ClientConn, error) {
	target, err := t.resolve(ctx, nodeID)
	if err != nil {
		return nil, fmt.Errorf("rpcshim: call %s: resolve node %s: %w", method, nodeID, err)
	}
	if target == "" {
		return nil, fmt.Errorf("%w: node %s has no gRPC address yet; call %s was not sent, retry once it registers",
			csi.ErrNodeNotReady, nodeID, method)
	}

	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, fmt.Errorf("%w: the gRPC transport is closed; call %s to node %s was not sent",
			csi.ErrUnavailable, method, nodeID)
	}
	old := t.conns[nodeID]
	if old != nil && old.target == target {
		t.mu.Unlock()
		return old.cc, nil
	}
	// NewClient neither dials nor blocks, so it may run under the lock;
	// this keeps a single connection per node without a second lookup.
	cc, err := grpc.NewClient(target, t.dialOpts...)
	if err != nil {
		t.mu.Unlock()
		return nil, fmt.Errorf("%w: cannot open a gRPC connection to node %s at %q: %v; call %s was not sent, check the address the host resolves for the node",
			csi.ErrUnavailable, nodeID, target, err, method)
	}
	t.conns[nodeID] = &nodeConn{target: target, cc: cc}
	t.mu.Unlock()

	if old != nil {
		t.logger.Debug("node address changed, replacing connection", "node_id", nodeID, "old_target", old.target, "target", target)
		t.closeConn(nodeID, old)
	} else {
		t.logger.Debug("opened connection to node", "node_id", nodeID, "target", target)
	}
	return cc, nil
}

func (t *GRPCTransport) closeConn(nodeID string, c *nodeConn) error {
	if err := c.cc.Close(); err != nil {
		t.logger.Debug("closing node connection failed", "node_id", nodeID, "target", c.target, "error", err)
		return fmt.Errorf("rpcshim: close connection to node %s: %w", nodeID, err)
	}
	return nil
}

// Forget closes the connection kept for nodeID, if any. Call it when a
// node leaves the cluster for good; a later Call to it opens a new one.
// Calls running on the old connection fail as Uncertain.
func (t *GRPCTransport) Forget(nodeID string) {
	t.mu.Lock()
	c := t.conns[nodeID]
	delete(t.conns, nodeID)
	t.mu.Unlock()
	if c != nil {
		t.logger.Debug("closing connection to node", "node_id", nodeID, "target", c.target)
		_ = t.closeConn(nodeID, c)
	}
}

// Close closes every node connection; calls still running on them fail
// as Uncertain and later calls fail with csi.ErrUnavailable. Close is
// idempotent.
func (t *GRPCTransport) Close() error {
	t.mu.Lock()
	conns := t.conns
	t.conns = make(map[string]*nodeConn)
	t.closed = true
	t.mu.Unlock()
	var errs []error
	for id, c := range conns {
		errs = append(errs, t.closeConn(id, c))
	}
	return errors.Join(errs...)
}

// callError turns a failed gRPC invocation into the Transport contract's
// errors. A handler's own error never arrives here (it travels in the
// reply), so a status is always the transport's.
func callError(ctx context.Context, nodeID, method string, err error) error {
	if ctxErr := ctxEnded(ctx); ctxErr != nil {
		return ctxError(nodeID, method, ctxErr)
	}
	st := status.Convert(err)
	switch st.Code() {
	case codes.Unavailable:
		return fmt.Errorf("%w: node %s is unreachable over gRPC (call %s): %s; retry later",
			csi.ErrUnavailable, nodeID, method, st.Message())
	case codes.DeadlineExceeded:
		return ctxError(nodeID, method, context.DeadlineExceeded)
	case codes.Canceled:
		// ctx is live, so the connection was closed under the call
		// (Forget, Close, a new address). It may have run; reporting
		// context.Canceled would wrongly suggest the caller gave up.
		return &classedError{
			msg:   fmt.Sprintf("rpcshim: the connection to node %s closed during call %s, which may or may not have run: %s", nodeID, method, st.Message()),
			class: csi.ClassUncertain,
		}
	}
	return &classedError{
		msg: fmt.Sprintf("rpcshim: call %s on node %s failed in the gRPC transport: %s: %s; check that the node agent serves %s on a gRPC server built with rpcshim.ServerCodecOption, from a compatible csikit version",
			method, nodeID, st.Code(), st.Message(), NodeServiceName),
		class: csi.ClassOfCode(csi.Code(st.Code())),
	}
}
