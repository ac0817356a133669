package rpcshim_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
)

const testClusterToken = "cluster-token-0123456789abcdef"

func TestGRPCIdentity_Config(t *testing.T) {
	ca := newTestCA(t, "ca")
	h := rpcshim.NewMux()
	servers := []struct {
		name string
		cfg  rpcshim.GRPCNodeServerConfig
		want string
	}{
		{"none", rpcshim.GRPCNodeServerConfig{Handler: h}, "no server identity"},
		{"insecure and token", rpcshim.GRPCNodeServerConfig{Handler: h, Insecure: true, ClusterToken: testClusterToken}, "choose one"},
		{"tls without client CAs", rpcshim.GRPCNodeServerConfig{Handler: h, TLS: &tls.Config{Certificates: []tls.Certificate{ca.issue(t, "n")}}}, "ClientCAs"},
		{"short token", rpcshim.GRPCNodeServerConfig{Handler: h, ClusterToken: "short"}, "shorter"},
	}
	for _, tc := range servers {
		t.Run("server/"+tc.name, func(t *testing.T) {
			_, err := rpcshim.NewGRPCNodeServer(tc.cfg)
			expectIs(t, err, csi.ErrInvalidRequest)
			expectContains(t, err.Error(), tc.want)
		})
	}
	resolve := func(context.Context, string) (string, error) { return "", nil }
	transports := []struct {
		name string
		cfg  rpcshim.GRPCTransportConfig
		want string
	}{
		{"none", rpcshim.GRPCTransportConfig{Resolve: resolve}, "no identity"},
		{"insecure and tls", rpcshim.GRPCTransportConfig{Resolve: resolve, Insecure: true, TLS: ca.serverTLS(t, ca)}, "choose one"},
		{"short token", rpcshim.GRPCTransportConfig{Resolve: resolve, ClusterToken: "short"}, "shorter"},
	}
	for _, tc := range transports {
		t.Run("transport/"+tc.name, func(t *testing.T) {
			_, err := rpcshim.NewGRPCTransport(tc.cfg)
			expectIs(t, err, csi.ErrInvalidRequest)
			expectContains(t, err.Error(), tc.want)
		})
	}
}

// serveGuardedNode serves a node endpoint for node n2 (which detaches
// through u) with cfg's identity on a fresh unix socket.
func serveGuardedNode(t *testing.T, cfg rpcshim.GRPCNodeServerConfig, u *epUnmounter, logger hclog.Logger) string {
	t.Helper()
	ep, err := rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{NodeID: "n2", Plugins: &epPlugins{}, Mounter: u})
	must(t, err)
	cfg.Handler, cfg.Logger = ep, logger
	srv, err := rpcshim.NewGRPCNodeServer(cfg)
	must(t, err)
	sock := filepath.Join(shortTempDir(t), "g.sock")
	lis, err := net.Listen("unix", sock)
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		must(t, <-done)
	})
	return "unix://" + sock
}

// TestGRPCNodeServer_RefusesWithoutServerIdentity is the attack of a
// process on the node's host that calls NodeDetach on the node
// endpoint directly: without the server's identity (no credentials, a
// wrong token, no client certificate, one from another CA) the call is
// refused and nothing is unmounted; with it, the call runs. The refusal
// is logged without the token.
func TestGRPCNodeServer_RefusesWithoutServerIdentity(t *testing.T) {
	ca, rogue := newTestCA(t, "cluster-ca"), newTestCA(t, "rogue-ca")
	guards := map[string]rpcshim.GRPCNodeServerConfig{
		"mtls":       {TLS: ca.nodeTLS(t)},
		"token":      {ClusterToken: testClusterToken},
		"mtls+token": {TLS: ca.nodeTLS(t), ClusterToken: testClusterToken},
	}
	callers := []struct {
		name string
		cfg  rpcshim.GRPCTransportConfig
		ok   map[string]bool
	}{
		{"no credentials", rpcshim.GRPCTransportConfig{Insecure: true}, nil},
		{"wrong token", rpcshim.GRPCTransportConfig{ClusterToken: strings.Repeat("x", 32)}, nil},
		{"tls without client certificate", rpcshim.GRPCTransportConfig{TLS: ca.serverTLS(t, nil), ClusterToken: testClusterToken}, nil},
		{"client certificate of another CA", rpcshim.GRPCTransportConfig{TLS: ca.serverTLS(t, rogue), ClusterToken: testClusterToken}, nil},
		{"cluster token", rpcshim.GRPCTransportConfig{ClusterToken: testClusterToken}, map[string]bool{"token": true}},
		{"cluster certificate", rpcshim.GRPCTransportConfig{TLS: ca.serverTLS(t, ca)}, map[string]bool{"mtls": true}},
		{"cluster certificate and token", rpcshim.GRPCTransportConfig{TLS: ca.serverTLS(t, ca), ClusterToken: testClusterToken}, map[string]bool{"mtls": true, "mtls+token": true, "token": false}},
	}
	for gname, guard := range guards {
		for _, c := range callers {
			t.Run(gname+"/"+c.name, func(t *testing.T) {
				var logs strings.Builder
				logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})
				u := &epUnmounter{}
				target := serveGuardedNode(t, guard, u, logger)
				cfg := c.cfg
				cfg.Resolve = func(context.Context, string) (string, error) { return target, nil }
				tr, err := rpcshim.NewGRPCTransport(cfg)
				must(t, err)
				defer tr.Close()
				err = tr.Call(context.Background(), "n2", rpcshim.MethodNodeDetach,
					&rpcshim.NodeDetachRequest{NodeID: "n2", Namespace: "default", VolumeID: "v1", AllocationID: "a1"}, nil)
				if c.ok[gname] {
					must(t, err)
					if len(u.requests()) != 1 {
						t.Fatalf("allowed detach reached the mounter %d times, want 1", len(u.requests()))
					}
					return
				}
				if err == nil {
					t.Fatal("a call without the server's identity was served")
				}
				if n := len(u.requests()); n != 0 {
					t.Fatalf("refused call unmounted %d times", n)
				}
				if errors.Is(err, csi.ErrPermissionDenied) && !strings.Contains(logs.String(), "refused a node call") {
					t.Fatalf("refusal not logged: %q", logs.String())
				}
				if strings.Contains(logs.String(), testClusterToken) || strings.Contains(err.Error(), testClusterToken) {
					t.Fatal("the cluster token reached a log or an error")
				}
			})
		}
	}
}

// TestGRPCNodeServer_Register_ChecksCertificate registers a mutual-TLS
// node server on a host's *grpc.Server whose TLS only asks for client
// certificates: a caller without one gets through the handshake, and
// the node server itself refuses it.
func TestGRPCNodeServer_Register_ChecksCertificate(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	nodeTLS := ca.nodeTLS(t)
	hostTLS := nodeTLS.Clone()
	hostTLS.ClientAuth = tls.VerifyClientCertIfGiven
	u := &epUnmounter{}
	ep, err := rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{NodeID: "n2", Plugins: &epPlugins{}, Mounter: u})
	must(t, err)
	srv, err := rpcshim.NewGRPCNodeServer(rpcshim.GRPCNodeServerConfig{Handler: ep, TLS: nodeTLS})
	must(t, err)
	gs := grpc.NewServer(rpcshim.ServerCodecOption(), grpc.Creds(credentials.NewTLS(hostTLS)))
	srv.Register(gs)
	sock := filepath.Join(shortTempDir(t), "h.sock")
	lis, err := net.Listen("unix", sock)
	must(t, err)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	call := func(c *tls.Config) error {
		tr, err := rpcshim.NewGRPCTransport(rpcshim.GRPCTransportConfig{
			Resolve: func(context.Context, string) (string, error) { return "unix://" + sock, nil }, TLS: c,
		})
		must(t, err)
		defer tr.Close()
		return tr.Call(context.Background(), "n2", rpcshim.MethodNodeDetach,
			&rpcshim.NodeDetachRequest{NodeID: "n2", Namespace: "default", VolumeID: "v1", AllocationID: "a1"}, nil)
	}
	expectIs(t, call(ca.serverTLS(t, nil)), csi.ErrPermissionDenied)
	if len(u.requests()) != 0 {
		t.Fatal("a caller without a client certificate reached the mounter")
	}
	must(t, call(ca.serverTLS(t, ca)))
	if len(u.requests()) != 1 {
		t.Fatalf("the server's call reached the mounter %d times, want 1", len(u.requests()))
	}
}
