package rpcshim_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
)

func TestNewGRPCTransport_Config(t *testing.T) {
	_, err := rpcshim.NewGRPCTransport(rpcshim.GRPCTransportConfig{})
	expectIs(t, err, csi.ErrInvalidRequest)
	expectContains(t, err.Error(), "Resolve")
}

func TestNewGRPCNodeServer_Config(t *testing.T) {
	_, err := rpcshim.NewGRPCNodeServer(rpcshim.GRPCNodeServerConfig{})
	expectIs(t, err, csi.ErrInvalidRequest)
	expectContains(t, err.Error(), "Handler")
}

func TestGRPCNodeServer_Serve_BadListener(t *testing.T) {
	srv, err := rpcshim.NewGRPCNodeServer(rpcshim.GRPCNodeServerConfig{Handler: rpcshim.NewMux(), Insecure: true})
	must(t, err)
	t.Run("nil", func(t *testing.T) {
		expectIs(t, srv.Serve(context.Background(), nil), csi.ErrInvalidRequest)
	})
	t.Run("closed", func(t *testing.T) {
		lis, err := net.Listen("unix", filepath.Join(shortTempDir(t), "c.sock"))
		must(t, err)
		must(t, lis.Close())
		err = srv.Serve(context.Background(), lis)
		mustErr(t, err)
		expectIs(t, err, net.ErrClosed)
	})
}

// TestGRPCTransport_Call_NodeStops checks that a node agent going away,
// before or during a call, gives a retryable error and never a hang.
func TestGRPCTransport_Call_NodeStops(t *testing.T) {
	tests := []struct {
		name      string
		duringRPC bool
	}{
		{"before the call", false},
		{"during the call", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			started := make(chan struct{})
			m := rpcshim.NewMux()
			rpcshim.Handle(m, "Block", func(ctx context.Context, _ *struct{}) (*struct{}, error) {
				close(started)
				<-ctx.Done()
				return nil, ctx.Err()
			})
			rpcshim.Handle(m, "Ping", func(context.Context, *struct{}) (*struct{}, error) { return &struct{}{}, nil })
			n := serveGRPCNode(t, m)
			book := &addrBook{}
			book.set("n1", n.target)
			tr := newGRPCTransport(t, book)
			must(t, tr.Call(context.Background(), "n1", "Ping", struct{}{}, nil))

			var err error
			if tc.duringRPC {
				go func() { <-started; n.stop() }()
				// No deadline: only the stop can end this call.
				err = tr.Call(context.Background(), "n1", "Block", struct{}{}, nil)
			} else {
				n.stop()
				err = tr.Call(context.Background(), "n1", "Block", struct{}{}, nil)
			}
			mustErr(t, err)
			if !csi.IsRetryable(err) {
				t.Errorf("error %v (class %v) is not retryable", err, csi.Classify(err))
			}
			expectContains(t, err.Error(), "n1")
		})
	}
}

// TestGRPCTransport_Call_NodeRestarts checks that the cached connection
// reaches a node again once its agent is back on the same socket, and
// that DialOptions reach the connection: WaitForReady makes a call wait
// out the reconnection instead of the test polling for it.
func TestGRPCTransport_Call_NodeRestarts(t *testing.T) {
	sock := filepath.Join(shortTempDir(t), "n.sock")
	serve := func(name string) (stop func()) {
		lis, err := net.Listen("unix", sock)
		must(t, err)
		srv, err := rpcshim.NewGRPCNodeServer(rpcshim.GRPCNodeServerConfig{Handler: whoMux(name), Insecure: true})
		must(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx, lis) }()
		return func() { cancel(); must(t, <-done) }
	}
	book := &addrBook{}
	book.set("n1", "unix://"+sock)
	tr, err := rpcshim.NewGRPCTransport(rpcshim.GRPCTransportConfig{
		Resolve:     book.resolve,
		Insecure:    true,
		DialOptions: []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.WaitForReady(true))},
	})
	must(t, err)
	defer func() { must(t, tr.Close()) }()

	stop := serve("first")
	got, err := callWho(t, tr, "n1")
	must(t, err)
	expectEqual(t, got, "first")
	stop()

	stop = serve("second")
	defer stop()
	// The first call may still go out on the connection the old agent
	// closed and fail retryably (a caller's retry loop absorbs this); the
	// next one waits for the new connection.
	got, err = callWho(t, tr, "n1")
	for attempt := 1; err != nil && csi.IsRetryable(err) && attempt < 3; attempt++ {
		got, err = callWho(t, tr, "n1")
	}
	must(t, err)
	expectEqual(t, got, "second")
}

func TestGRPCTransport_Call_Resolve(t *testing.T) {
	n1 := serveGRPCNode(t, whoMux("one"))
	tests := []struct {
		name    string
		resolve func(context.Context, string) (string, error)
		check   func(t *testing.T, err error)
	}{
		{"host error keeps its identity", func(context.Context, string) (string, error) {
			return "", fmt.Errorf("node records: %w", csi.ErrNodeNotFound)
		}, func(t *testing.T, err error) {
			expectIs(t, err, csi.ErrNodeNotFound)
			expectClass(t, err, csi.ClassFinal)
			expectContains(t, err.Error(), "n1")
		}},
		{"empty target is not ready", func(context.Context, string) (string, error) {
			return "", nil
		}, func(t *testing.T, err error) {
			expectIs(t, err, csi.ErrNodeNotReady)
			expectUnreachable(t, err, "n1")
		}},
		{"malformed target is unavailable", func(context.Context, string) (string, error) {
			return "%zz", nil
		}, func(t *testing.T, err error) {
			expectIs(t, err, csi.ErrUnavailable)
			expectUnreachable(t, err, "n1")
		}},
		{"target without a listener is unavailable", func(context.Context, string) (string, error) {
			return "unix://" + filepath.Join(shortTempDir(t), "none.sock"), nil
		}, func(t *testing.T, err error) {
			expectIs(t, err, csi.ErrUnavailable)
			expectUnreachable(t, err, "n1")
		}},
		{"resolver gets the caller's ctx", func(ctx context.Context, _ string) (string, error) {
			if ctx.Value(ctxKey{}) != "caller" {
				return "", errors.New("resolver got another ctx")
			}
			return n1.target, nil
		}, func(t *testing.T, err error) { must(t, err) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := rpcshim.NewGRPCTransport(rpcshim.GRPCTransportConfig{Resolve: tc.resolve, Insecure: true})
			must(t, err)
			defer func() { must(t, tr.Close()) }()
			ctx := context.WithValue(context.Background(), ctxKey{}, "caller")
			var got string
			tc.check(t, tr.Call(ctx, "n1", "Who", struct{}{}, &got))
		})
	}
}

type ctxKey struct{}

// TestGRPCTransport_Call_AddressChange checks that a node that moves is
// followed on the next call, and that Forget drops a connection.
func TestGRPCTransport_Call_AddressChange(t *testing.T) {
	a := serveGRPCNode(t, whoMux("a"))
	b := serveGRPCNode(t, whoMux("b"))
	book := &addrBook{}
	tr := newGRPCTransport(t, book)
	steps := []struct {
		target string
		forget bool
		want   string
	}{
		{a.target, false, "a"},
		{b.target, false, "b"},
		{a.target, false, "a"},
		{a.target, true, "a"},
		{b.target, true, "b"},
	}
	for i, s := range steps {
		t.Run(fmt.Sprintf("step %d", i), func(t *testing.T) {
			book.set("n1", s.target)
			if s.forget {
				tr.Forget("n1")
			}
			got, err := callWho(t, tr, "n1")
			must(t, err)
			expectEqual(t, got, s.want)
		})
	}
	tr.Forget("never-called") // no connection: nothing to do
}

func TestGRPCTransport_Close(t *testing.T) {
	n := serveGRPCNode(t, whoMux("x"))
	book := &addrBook{}
	book.set("n1", n.target)
	tr, err := rpcshim.NewGRPCTransport(rpcshim.GRPCTransportConfig{Resolve: book.resolve, Insecure: true})
	must(t, err)
	_, err = callWho(t, tr, "n1")
	must(t, err)
	must(t, tr.Close())
	_, err = callWho(t, tr, "n1")
	expectIs(t, err, csi.ErrUnavailable)
	expectUnreachable(t, err, "n1")
	expectContains(t, err.Error(), "closed")
	must(t, tr.Close())
}

// TestGRPCNodeServer_Register_SharedServer serves the node service next
// to a protobuf service on one *grpc.Server, as a host that already runs
// one would, and checks that both work.
func TestGRPCNodeServer_Register_SharedServer(t *testing.T) {
	var intercepted atomic.Value
	gs := grpc.NewServer(rpcshim.ServerCodecOption(), grpc.UnaryInterceptor(
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
			intercepted.Store(info.FullMethod)
			return next(ctx, req)
		}))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	srv, err := rpcshim.NewGRPCNodeServer(rpcshim.GRPCNodeServerConfig{Handler: whoMux("shared"), Insecure: true})
	must(t, err)
	srv.Register(gs)
	sock := filepath.Join(shortTempDir(t), "s.sock")
	lis, err := net.Listen("unix", sock)
	must(t, err)
	done := make(chan error, 1)
	go func() { done <- gs.Serve(lis) }()
	defer func() { gs.Stop(); must(t, <-done) }()

	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(t, err)
	defer cc.Close()
	hr, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{})
	must(t, err)
	expectEqual(t, hr.GetStatus(), healthpb.HealthCheckResponse_SERVING)
	expectEqual(t, intercepted.Load(), any("/grpc.health.v1.Health/Check"))

	book := &addrBook{}
	book.set("n1", "unix://"+sock)
	tr := newGRPCTransport(t, book)
	got, err := callWho(t, tr, "n1")
	must(t, err)
	expectEqual(t, got, "shared")
	expectEqual(t, intercepted.Load(), any("/"+rpcshim.NodeServiceName+"/Call"))
}

// TestGRPCNodeServer_Register_WithoutCodec checks that a host that forgot
// ServerCodecOption gets a final error that says what to do.
func TestGRPCNodeServer_Register_WithoutCodec(t *testing.T) {
	gs := grpc.NewServer()
	srv, err := rpcshim.NewGRPCNodeServer(rpcshim.GRPCNodeServerConfig{Handler: whoMux("x"), Insecure: true})
	must(t, err)
	srv.Register(gs)
	sock := filepath.Join(shortTempDir(t), "p.sock")
	lis, err := net.Listen("unix", sock)
	must(t, err)
	done := make(chan error, 1)
	go func() { done <- gs.Serve(lis) }()
	defer func() { gs.Stop(); must(t, <-done) }()

	book := &addrBook{}
	book.set("n1", "unix://"+sock)
	_, err = callWho(t, newGRPCTransport(t, book), "n1")
	mustErr(t, err)
	expectClass(t, err, csi.ClassFinal)
	expectContains(t, err.Error(), "ServerCodecOption")
}

func TestGRPCTransport_Call_TCP(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	srv, err := rpcshim.NewGRPCNodeServer(rpcshim.GRPCNodeServerConfig{Handler: whoMux("tcp"), Insecure: true})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	defer func() { cancel(); must(t, <-done) }()

	book := &addrBook{}
	book.set("n1", lis.Addr().String())
	got, err := callWho(t, newGRPCTransport(t, book), "n1")
	must(t, err)
	expectEqual(t, got, "tcp")
}
