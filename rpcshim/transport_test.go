package rpcshim_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type echoReq struct {
	Name string
	Tags []string
}

type echoResp struct {
	Greeting string
	Tags     []string
}

func echo(_ context.Context, req *echoReq) (*echoResp, error) {
	return &echoResp{Greeting: "hello " + req.Name, Tags: req.Tags}, nil
}

// harness is one Transport under test with the means to give a node an
// endpoint and to cut it off.
type harness struct {
	tr rpcshim.Transport
	// serve makes h the endpoint of nodeID.
	serve func(t testing.TB, nodeID string, h rpcshim.Handler)
	// down leaves nodeID known to the host but unreachable.
	down func(t testing.TB, nodeID string)
}

// transports lists every implementation the shared table runs against.
var transports = []struct {
	name string
	new  func(t testing.TB) *harness
}{
	{"inmem", newInmemHarness},
	{"grpc", newGRPCHarness},
}

func newInmemHarness(testing.TB) *harness {
	tr := rpcshim.NewInmemTransport()
	return &harness{
		tr:    tr,
		serve: func(_ testing.TB, nodeID string, h rpcshim.Handler) { tr.Register(nodeID, h) },
		down:  func(_ testing.TB, nodeID string) { tr.SetDown(nodeID, true) },
	}
}

// shortTempDir returns a directory whose path leaves room for a socket
// name under the kernel's 108-byte limit, whatever the test's name.
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rps")
	must(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// grpcNode is one node agent serving a Handler on a unix socket.
type grpcNode struct {
	target string
	stop   func()
}

// serveGRPCNode starts a GRPCNodeServer for h on a fresh unix socket and
// stops it at cleanup.
func serveGRPCNode(t testing.TB, h rpcshim.Handler) *grpcNode {
	t.Helper()
	sock := filepath.Join(shortTempDir(t), "n.sock")
	lis, err := net.Listen("unix", sock)
	must(t, err)
	srv, err := rpcshim.NewGRPCNodeServer(rpcshim.GRPCNodeServerConfig{Handler: h})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("node server: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &grpcNode{target: "unix://" + sock, stop: stop}
}

// addrBook is a host's node records as Resolve sees them.
type addrBook struct {
	mu    sync.Mutex
	addrs map[string]string
}

func (b *addrBook) set(nodeID, target string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.addrs == nil {
		b.addrs = make(map[string]string)
	}
	b.addrs[nodeID] = target
}

func (b *addrBook) resolve(_ context.Context, nodeID string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if a, ok := b.addrs[nodeID]; ok {
		return a, nil
	}
	return "", fmt.Errorf("%w: node %s has not registered an address", csi.ErrNodeNotReady, nodeID)
}

func newGRPCTransport(t testing.TB, book *addrBook) *rpcshim.GRPCTransport {
	t.Helper()
	tr, err := rpcshim.NewGRPCTransport(rpcshim.GRPCTransportConfig{Resolve: book.resolve})
	must(t, err)
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Errorf("close transport: %v", err)
		}
	})
	return tr
}

func newGRPCHarness(t testing.TB) *harness {
	book := &addrBook{}
	var mu sync.Mutex
	nodes := make(map[string]*grpcNode)
	return &harness{
		tr: newGRPCTransport(t, book),
		serve: func(t testing.TB, nodeID string, h rpcshim.Handler) {
			n := serveGRPCNode(t, h)
			mu.Lock()
			nodes[nodeID] = n
			mu.Unlock()
			book.set(nodeID, n.target)
		},
		down: func(t testing.TB, nodeID string) {
			mu.Lock()
			n := nodes[nodeID]
			mu.Unlock()
			if n == nil {
				t.Fatalf("node %s was never served", nodeID)
			}
			n.stop()
		},
	}
}

// assertRemote checks what every handler error must keep on the caller's
// side: its message, its class and its sentinel.
func assertRemote(t *testing.T, err error, msg string, class csi.Class, sentinel error) {
	t.Helper()
	mustErr(t, err)
	expectEqual(t, err.Error(), msg)
	expectClass(t, err, class)
	if sentinel != nil {
		expectIs(t, err, sentinel)
	}
	var re *rpcshim.RemoteError
	if !errors.As(err, &re) {
		t.Errorf("error %v holds no *RemoteError", err)
	}
}

// failing registers, under method, a handler that returns err.
func failing(m *rpcshim.Mux, method string, err error) {
	rpcshim.Handle(m, method, func(context.Context, *echoReq) (*echoResp, error) { return nil, err })
}

var transportCases = []struct {
	name string
	run  func(t *testing.T, h *harness)
}{
	{"typed round trip through a Mux", func(t *testing.T, h *harness) {
		m := rpcshim.NewMux()
		rpcshim.Handle(m, "Echo", echo)
		h.serve(t, "n1", m)
		var resp echoResp
		err := h.tr.Call(context.Background(), "n1", "Echo", &echoReq{Name: "n1", Tags: []string{"a", "b"}}, &resp)
		must(t, err)
		expectEqual(t, resp, echoResp{Greeting: "hello n1", Tags: []string{"a", "b"}})
	}},
	{"nil resp discards the reply", func(t *testing.T, h *harness) {
		m := rpcshim.NewMux()
		rpcshim.Handle(m, "Echo", echo)
		h.serve(t, "n1", m)
		must(t, h.tr.Call(context.Background(), "n1", "Echo", &echoReq{Name: "x"}, nil))
	}},
	{"nil reply leaves resp untouched", func(t *testing.T, h *harness) {
		m := rpcshim.NewMux()
		rpcshim.Handle(m, "Nothing", func(context.Context, *echoReq) (*echoResp, error) { return nil, nil })
		h.serve(t, "n1", m)
		resp := echoResp{Greeting: "kept"}
		must(t, h.tr.Call(context.Background(), "n1", "Nothing", &echoReq{}, &resp))
		expectEqual(t, resp.Greeting, "kept")
	}},
	{"unknown method is not supported", func(t *testing.T, h *harness) {
		h.serve(t, "n1", rpcshim.NewMux())
		err := h.tr.Call(context.Background(), "n1", "NoSuchMethod", &echoReq{}, &echoResp{})
		assertRemote(t, err, `not supported by plugin: the node does not serve method "NoSuchMethod"; check that server and node run compatible csikit versions`,
			csi.ClassFinal, csi.ErrNotSupported)
	}},
	{"sentinel keeps identity and class", func(t *testing.T, h *harness) {
		m := rpcshim.NewMux()
		failing(m, "Mount", fmt.Errorf("on node n1: %w", csi.ErrPluginNotFound))
		h.serve(t, "n1", m)
		err := h.tr.Call(context.Background(), "n1", "Mount", &echoReq{}, &echoResp{})
		assertRemote(t, err, "on node n1: plugin not found", csi.ClassRetryable, csi.ErrPluginNotFound)
		expectEqual(t, csi.IsRetryable(err), true)
		if errors.Is(err, csi.ErrPluginUnhealthy) {
			t.Errorf("error %v matches a sentinel the node did not wrap", err)
		}
	}},
	{"invalid ID error keeps ErrInvalidID", func(t *testing.T, h *harness) {
		m := rpcshim.NewMux()
		failing(m, "Mount", fmt.Errorf("mount: %w", csi.ValidateVolumeID("../etc")))
		h.serve(t, "n1", m)
		err := h.tr.Call(context.Background(), "n1", "Mount", &echoReq{}, nil)
		assertRemote(t, err, `mount: invalid volume ID "../etc": byte 2 ('/') is not a letter, digit, '-', '_' or '.'`, csi.ClassFinal, csi.ErrInvalidID)
	}},
	{"plugin NotFound keeps its code for teardown", func(t *testing.T, h *harness) {
		m := rpcshim.NewMux()
		failing(m, "Unmount", fmt.Errorf("unpublish volume v1: %w",
			&csi.RPCError{Method: "NodeUnpublishVolume", Code: csi.CodeNotFound, Message: "volume v1 is not published"}))
		h.serve(t, "n1", m)
		err := h.tr.Call(context.Background(), "n1", "Unmount", &echoReq{}, &echoResp{})
		assertRemote(t, err, "unpublish volume v1: NodeUnpublishVolume: NotFound: volume v1 is not published", csi.ClassFinal, nil)
		expectEqual(t, csi.CodeOf(err), csi.CodeNotFound)
		expectEqual(t, csi.TeardownDone(err), true)
		var rpc *csi.RPCError
		if !errors.As(err, &rpc) {
			t.Fatalf("error %v holds no *csi.RPCError", err)
		}
		expectEqual(t, *rpc, csi.RPCError{Method: "NodeUnpublishVolume", Code: csi.CodeNotFound, Message: "volume v1 is not published"})
	}},
	{"plugin deadline stays uncertain", func(t *testing.T, h *harness) {
		m := rpcshim.NewMux()
		failing(m, "Stage", &csi.RPCError{Method: "NodeStageVolume", Code: csi.CodeDeadlineExceeded, Message: "timed out"})
		h.serve(t, "n1", m)
		err := h.tr.Call(context.Background(), "n1", "Stage", &echoReq{}, nil)
		assertRemote(t, err, "NodeStageVolume: DeadlineExceeded: timed out", csi.ClassUncertain, nil)
		expectEqual(t, csi.CodeOf(err), csi.CodeDeadlineExceeded)
	}},
	{"node-side context error stays uncertain", func(t *testing.T, h *harness) {
		m := rpcshim.NewMux()
		failing(m, "Stage", fmt.Errorf("plugin call timed out on the node: %w", context.DeadlineExceeded))
		h.serve(t, "n1", m)
		err := h.tr.Call(context.Background(), "n1", "Stage", &echoReq{}, nil)
		assertRemote(t, err, "plugin call timed out on the node: context deadline exceeded", csi.ClassUncertain, nil)
	}},
	{"plain error is final", func(t *testing.T, h *harness) {
		m := rpcshim.NewMux()
		failing(m, "Stage", errors.New("disk on fire"))
		h.serve(t, "n1", m)
		err := h.tr.Call(context.Background(), "n1", "Stage", &echoReq{}, nil)
		assertRemote(t, err, "disk on fire", csi.ClassFinal, nil)
		expectEqual(t, csi.CodeOf(err), csi.CodeUnknown)
	}},
	{"unknown node is not ready", func(t *testing.T, h *harness) {
		err := h.tr.Call(context.Background(), "ghost", "Echo", &echoReq{}, &echoResp{})
		expectUnreachable(t, err, "ghost")
	}},
	{"down node is unreachable", func(t *testing.T, h *harness) {
		m := rpcshim.NewMux()
		rpcshim.Handle(m, "Echo", echo)
		h.serve(t, "n1", m)
		must(t, h.tr.Call(context.Background(), "n1", "Echo", &echoReq{}, nil))
		h.down(t, "n1")
		err := h.tr.Call(context.Background(), "n1", "Echo", &echoReq{}, &echoResp{})
		expectUnreachable(t, err, "n1")
	}},
	{"deadline reaches the handler", func(t *testing.T, h *harness) {
		m := rpcshim.NewMux()
		sawDeadline := make(chan bool, 1)
		rpcshim.Handle(m, "Block", func(ctx context.Context, _ *echoReq) (*echoResp, error) {
			_, ok := ctx.Deadline()
			sawDeadline <- ok
			<-ctx.Done()
			return nil, ctx.Err()
		})
		h.serve(t, "n1", m)
		// The deadline is what the call is about, not a threshold: the
		// handler blocks until it passes, however long that takes.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		err := h.tr.Call(ctx, "n1", "Block", &echoReq{}, &echoResp{})
		mustErr(t, err)
		expectIs(t, err, context.DeadlineExceeded)
		expectClass(t, err, csi.ClassUncertain)
		expectContains(t, err.Error(), "n1")
		if !<-sawDeadline {
			t.Error("the handler's ctx has no deadline")
		}
	}},
	{"cancel reaches the handler", func(t *testing.T, h *harness) {
		m := rpcshim.NewMux()
		started := make(chan struct{})
		returned := make(chan error, 1)
		rpcshim.Handle(m, "Block", func(ctx context.Context, _ *echoReq) (*echoResp, error) {
			close(started)
			<-ctx.Done()
			returned <- ctx.Err()
			return nil, ctx.Err()
		})
		h.serve(t, "n1", m)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-started; cancel() }()
		err := h.tr.Call(ctx, "n1", "Block", &echoReq{}, &echoResp{})
		expectIs(t, err, context.Canceled)
		expectClass(t, err, csi.ClassUncertain)
		expectIs(t, <-returned, context.Canceled)
	}},
	{"done ctx is not sent", func(t *testing.T, h *harness) {
		m := rpcshim.NewMux()
		ran := make(chan struct{}, 1)
		rpcshim.Handle(m, "Echo", func(ctx context.Context, req *echoReq) (*echoResp, error) {
			ran <- struct{}{}
			return echo(ctx, req)
		})
		h.serve(t, "n1", m)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := h.tr.Call(ctx, "n1", "Echo", &echoReq{}, &echoResp{})
		expectIs(t, err, context.Canceled)
		if len(ran) != 0 {
			t.Error("the handler ran")
		}
	}},
	{"invalid node ID is refused", func(t *testing.T, h *harness) {
		err := h.tr.Call(context.Background(), "../n1", "Echo", &echoReq{}, &echoResp{})
		expectIs(t, err, csi.ErrInvalidID)
		expectClass(t, err, csi.ClassFinal)
	}},
	{"request that does not encode is not sent", func(t *testing.T, h *harness) {
		m := rpcshim.NewMux()
		rpcshim.Handle(m, "Echo", echo)
		h.serve(t, "n1", m)
		err := h.tr.Call(context.Background(), "n1", "Echo", make(chan int), &echoResp{})
		expectIs(t, err, csi.ErrInvalidRequest)
		expectClass(t, err, csi.ClassFinal)
	}},
	{"request of the wrong shape is invalid", func(t *testing.T, h *harness) {
		m := rpcshim.NewMux()
		rpcshim.Handle(m, "Echo", echo)
		h.serve(t, "n1", m)
		err := h.tr.Call(context.Background(), "n1", "Echo", map[string]int{"Name": 3}, &echoResp{})
		expectIs(t, err, csi.ErrInvalidRequest)
		expectClass(t, err, csi.ClassFinal)
	}},
	{"reply of the wrong shape is final", func(t *testing.T, h *harness) {
		m := rpcshim.NewMux()
		rpcshim.Handle(m, "Echo", echo)
		h.serve(t, "n1", m)
		var wrong struct{ Greeting int }
		err := h.tr.Call(context.Background(), "n1", "Echo", &echoReq{}, &wrong)
		mustErr(t, err)
		expectClass(t, err, csi.ClassFinal)
		expectContains(t, err.Error(), "n1")
	}},
	{"concurrent calls to several nodes", func(t *testing.T, h *harness) {
		for _, id := range []string{"n1", "n2", "n3"} {
			m := rpcshim.NewMux()
			rpcshim.Handle(m, "Who", func(context.Context, *echoReq) (*echoResp, error) { return &echoResp{Greeting: id}, nil })
			h.serve(t, id, m)
		}
		var wg sync.WaitGroup
		for i := range 60 {
			id := fmt.Sprintf("n%d", i%3+1)
			wg.Go(func() {
				var resp echoResp
				if err := h.tr.Call(context.Background(), id, "Who", &echoReq{}, &resp); err != nil {
					t.Errorf("call %s: %v", id, err)
					return
				}
				expectEqual(t, resp.Greeting, id)
			})
		}
		wg.Wait()
	}},
}

// TestTransport_Call_Conformance runs the same table against every
// transport, so they cannot drift apart.
func TestTransport_Call_Conformance(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			for _, tc := range transportCases {
				t.Run(tc.name, func(t *testing.T) {
					tc.run(t, tr.new(t))
				})
			}
		})
	}
}

// BenchmarkTransportCall measures one small typed call through each
// transport, Mux included; the gRPC one crosses a real unix socket.
func BenchmarkTransportCall(b *testing.B) {
	for _, tr := range transports {
		b.Run(tr.name, func(b *testing.B) {
			h := tr.new(b)
			m := rpcshim.NewMux()
			rpcshim.Handle(m, "Echo", echo)
			h.serve(b, "n1", m)
			req := &echoReq{Name: "bench", Tags: []string{"a", "b"}}
			ctx := context.Background()
			var resp echoResp
			must(b, h.tr.Call(ctx, "n1", "Echo", req, &resp)) // connect outside the timing
			b.ReportAllocs()
			for b.Loop() {
				if err := h.tr.Call(ctx, "n1", "Echo", req, &resp); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/call")
		})
	}
}

// Small checks shared by the transport tests; expectUnreachable states the
// Transport contract's rule for a node it cannot reach.

// must stops the test if err is not nil.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

// mustErr stops the test if err is nil.
func mustErr(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("got no error, want one")
	}
}

func expectIs(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("error %v does not match %v", err, target)
	}
}

func expectClass(t testing.TB, err error, want csi.Class) {
	t.Helper()
	if got := csi.Classify(err); got != want {
		t.Errorf("Classify(%v) = %v, want %v", err, got, want)
	}
}

// expectUnreachable checks the transport contract's error for a node it
// cannot reach: ErrNodeNotReady or ErrUnavailable, Retryable, naming it.
func expectUnreachable(t testing.TB, err error, nodeID string) {
	t.Helper()
	mustErr(t, err)
	if !errors.Is(err, csi.ErrNodeNotReady) && !errors.Is(err, csi.ErrUnavailable) {
		t.Errorf("error %v matches neither ErrNodeNotReady nor ErrUnavailable", err)
	}
	expectClass(t, err, csi.ClassRetryable)
	expectContains(t, err.Error(), nodeID)
}

func expectEqual[T any](t testing.TB, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v, want %#v", got, want)
	}
}

func expectContains(t testing.TB, s, sub string) {
	t.Helper()
	if !strings.Contains(s, sub) {
		t.Errorf("%q does not contain %q", s, sub)
	}
}
