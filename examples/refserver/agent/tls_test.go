package agent_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/agent"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/internal/tlsconf"
	"github.com/csikit/csikit/rpcshim"
)

// TestAgent_TLS_RefusesClientCertOfAnotherCA: an agent serving mutual
// TLS refuses a caller whose client certificate another CA signed, even
// one that trusts the agent's certificate, and nothing reaches the
// mounter; a caller with the cluster CA's server certificate gets
// through to the agent's own checks.
func TestAgent_TLS_RefusesClientCertOfAnotherCA(t *testing.T) {
	dir := shortTempDir(t)
	good, other := filepath.Join(dir, "tls"), filepath.Join(dir, "other")
	must(t, tlsconf.Init(good, nil))
	must(t, tlsconf.Init(other, nil))
	load := func(d, part string) *tlsconf.Bundle {
		b, err := tlsconf.Load(tlsconf.Paths(d, part))
		must(t, err)
		return b
	}
	agentTLS, serverTLS, foreign := load(good, "agent"), load(good, "server"), load(other, "server")
	_, _, client := serverWithClient(t)
	a, err := agent.New(agent.Config{
		NodeID: "node-1", Server: client, DataDir: filepath.Join(dir, "node-1"), NoSync: true, TLS: agentTLS.MutualServer(),
		Hostpath: &hostpath.Config{DataDir: filepath.Join(dir, "plugin"), Mount: hostpath.MountSymlink, Staging: true},
	})
	must(t, err)
	nodeAddr := runAgent(t, a)
	dial := func(cfg rpcshim.GRPCTransportConfig) *rpcshim.GRPCTransport {
		cfg.Resolve = func(context.Context, string) (string, error) { return nodeAddr, nil }
		tr, err := rpcshim.NewGRPCTransport(cfg)
		must(t, err)
		t.Cleanup(func() { _ = tr.Close() })
		return tr
	}
	// No volume: the agent's own check refuses it with ErrInvalidRequest
	// once the caller is let in.
	req := &api.NodeMountRequest{Claim: &csi.Claim{AllocationID: "a1", NodeID: "node-1"}}
	foreignConf := foreign.Client()
	foreignConf.RootCAs = agentTLS.Pool() // it trusts the agent; the agent does not trust it
	for name, cfg := range map[string]rpcshim.GRPCTransportConfig{
		"client cert of another CA": {TLS: foreignConf},
		"plaintext":                 {Insecure: true},
	} {
		t.Run(name, func(t *testing.T) {
			before := a.Mounter().Stats().PluginCalls
			err := dial(cfg).Call(context.Background(), "node-1", api.MethodMountVolume, req, &api.NodeMountResponse{})
			if err == nil || errors.Is(err, csi.ErrInvalidRequest) {
				t.Fatalf("MountVolume: %v, want the connection refused", err)
			}
			if after := a.Mounter().Stats().PluginCalls; after != before {
				t.Fatalf("plugin calls %d -> %d", before, after)
			}
		})
	}
	err = dial(rpcshim.GRPCTransportConfig{TLS: serverTLS.Client()}).Call(context.Background(), "node-1", api.MethodMountVolume, req, &api.NodeMountResponse{})
	if !errors.Is(err, csi.ErrInvalidRequest) {
		t.Fatalf("MountVolume with the server's certificate: %v, want the agent's ErrInvalidRequest", err)
	}
}
