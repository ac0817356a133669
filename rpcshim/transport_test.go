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

	"go.uber.org/goleak"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/rpcshim/rpcshimtest"
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

// transports lists every implementation the shared table runs against.
var transports = []struct {
	name string
	new  func(t testing.TB) *rpcshimtest.Harness
}{
	{"inmem", newInmemHarness},
	{"grpc", newGRPCHarness},
}

func newInmemHarness(t testing.TB) *rpcshimtest.Harness {
	tr := rpcshim.NewInmemTransport()
	t.Cleanup(func() { must(t, tr.Close()) })
	return &rpcshimtest.Harness{
		Transport: tr,
		Serve:     func(_ testing.TB, nodeID string, h rpcshim.Handler) { tr.Register(nodeID, h) },
		Down:      func(_ testing.TB, nodeID string) { tr.SetDown(nodeID, true) },
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
	srv, err := rpcshim.NewGRPCNodeServer(rpcshim.GRPCNodeServerConfig{Handler: h, Insecure: true})
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
	tr, err := rpcshim.NewGRPCTransport(rpcshim.GRPCTransportConfig{Resolve: book.resolve, Insecure: true})
	must(t, err)
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Errorf("close transport: %v", err)
		}
	})
	return tr
}

func newGRPCHarness(t testing.TB) *rpcshimtest.Harness {
	book := &addrBook{}
	var mu sync.Mutex
	nodes := make(map[string]*grpcNode)
	return &rpcshimtest.Harness{
		Transport: newGRPCTransport(t, book),
		Serve: func(t testing.TB, nodeID string, h rpcshim.Handler) {
			n := serveGRPCNode(t, h)
			mu.Lock()
			nodes[nodeID] = n
			mu.Unlock()
			book.set(nodeID, n.target)
		},
		Down: func(t testing.TB, nodeID string) {
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

// TestTransport_Call_Conformance runs rpcshimtest's suite against every
// transport, so they cannot drift apart.
func TestTransport_Call_Conformance(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			rpcshimtest.Run(t, func(t *testing.T) *rpcshimtest.Harness { return tr.new(t) })
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
			h.Serve(b, "n1", m)
			req := &echoReq{Name: "bench", Tags: []string{"a", "b"}}
			ctx := context.Background()
			var resp echoResp
			must(b, h.Transport.Call(ctx, "n1", "Echo", req, &resp)) // connect outside the timing
			b.ReportAllocs()
			for b.Loop() {
				if err := h.Transport.Call(ctx, "n1", "Echo", req, &resp); err != nil {
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
