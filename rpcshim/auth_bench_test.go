package rpcshim_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// grpcClaimEnv is a Server whose controller node n1 is reached over the
// gRPC transport on a unix socket, with (secure) or without mutual TLS
// and an Authorizer. Claims are for node n2.
type grpcClaimEnv struct {
	ctl     *csitest.Plugin
	applier *state.LocalApplier
	server  *rpcshim.Server
	ctx     context.Context
}

func newGRPCClaimEnv(b *testing.B, secure bool) *grpcClaimEnv {
	caps := csi.ControllerCapabilities{PublishUnpublishVolume: true}
	e := &grpcClaimEnv{ctx: context.Background()}
	e.ctl = csitest.Start(b, csitest.Config{Type: csi.PluginTypeController, Name: "fake.csikit.io", Controller: caps})
	info := &csi.PluginInfo{
		PluginID: rtPlugin, AllocationID: "ctl-1", Type: csi.PluginTypeController, Healthy: true, UpdateTime: rtTime,
		Provider: "fake.csikit.io", RequiresController: true, ControllerInfo: &csi.ControllerInfo{Capabilities: caps},
	}
	plugins := &epPlugins{}
	plugins.set(rtPlugin, newPluginClient(b, e.ctl), info)
	store, err := state.NewMemStore(state.Config{})
	must(b, err)
	e.applier = state.NewLocalApplier(store)
	e.apply(b, state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{*info}})
	e.apply(b, state.UpsertNodePlugins{NodeID: "n2", Plugins: []csi.PluginInfo{{
		PluginID: rtPlugin, AllocationID: "node-n2", Type: csi.PluginTypeNode, Healthy: true, UpdateTime: rtTime,
		Provider: "fake.csikit.io", RequiresController: true, NodeInfo: &csi.NodeInfo{ID: "csi-n2"},
	}}})

	nodeCfg := rpcshim.GRPCNodeServerConfig{Insecure: true}
	trCfg := rpcshim.GRPCTransportConfig{Insecure: true}
	var auth rpcshim.Authorizer
	if secure {
		ca := newTestCA(b, "cluster-ca")
		nodeCfg = rpcshim.GRPCNodeServerConfig{TLS: ca.nodeTLS(b)}
		trCfg = rpcshim.GRPCTransportConfig{TLS: ca.serverTLS(b, ca)}
		grants := map[csi.Principal]map[string]bool{{Kind: "token", ID: "ci"}: {"default/" + string(csi.PermVolumeClaim): true}}
		auth = rpcshim.AuthorizerFunc(func(ctx context.Context, ns string, perm csi.Permission) error {
			if p, ok := csi.PrincipalFrom(ctx); ok && grants[p][ns+"/"+string(perm)] {
				return nil
			}
			return csi.ErrPermissionDenied
		})
		e.ctx = csi.WithPrincipal(e.ctx, csi.Principal{Kind: "token", ID: "ci"})
	}
	ep, err := rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{NodeID: "n1", Plugins: plugins, Mounter: &epUnmounter{}})
	must(b, err)
	nodeCfg.Handler = ep
	ns, err := rpcshim.NewGRPCNodeServer(nodeCfg)
	must(b, err)
	sock := filepath.Join(shortTempDir(b), "n1.sock")
	lis, err := net.Listen("unix", sock)
	must(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ns.Serve(ctx, lis) }()
	b.Cleanup(func() {
		cancel()
		must(b, <-done)
	})
	trCfg.Resolve = func(context.Context, string) (string, error) { return "unix://" + sock, nil }
	tr, err := rpcshim.NewGRPCTransport(trCfg)
	must(b, err)
	b.Cleanup(func() { _ = tr.Close() })
	statuses := &rtStatuses{}
	statuses.Set("n1", csi.NodeStatusReady)
	statuses.Set("n2", csi.NodeStatusReady)
	router, err := rpcshim.NewRouter(rpcshim.RouterConfig{Store: store, Transport: tr, NodeStatuses: statuses})
	must(b, err)
	e.server, err = rpcshim.NewServer(rpcshim.ServerConfig{Store: store, Applier: e.applier, Router: router, Authorizer: auth})
	must(b, err)
	return e
}

func (e *grpcClaimEnv) apply(b *testing.B, cmd state.Command) {
	b.Helper()
	_, err := e.applier.Apply(context.Background(), cmd)
	must(b, err)
}

// claim registers volume i and an allocation for it on n2 (not
// timed), then times a claim of it: a new attachment, so the claim
// makes ControllerPublishVolume through the transport to n1.
func (e *grpcClaimEnv) claim(b *testing.B, i int) time.Duration {
	vol, alloc := fmt.Sprintf("v%d", i), fmt.Sprintf("a%d", i)
	e.ctl.AddVolume("ext-"+vol, 1<<30, nil)
	e.apply(b, state.RegisterVolume{Volume: csi.Volume{
		ID: vol, Namespace: "default", PluginID: rtPlugin, ExternalID: "ext-" + vol, Capabilities: []csi.Capability{snwFS},
		Secrets: csi.Secrets{"token": "s3cr3t"},
	}})
	e.apply(b, state.UpsertAllocations{Allocations: []csi.Allocation{{ID: alloc, Namespace: "default", NodeID: "n2"}}})
	start := time.Now()
	_, err := e.server.Claim(e.ctx, &rpcshim.VolumeClaimRequest{Namespace: "default", VolumeID: vol, Claim: csi.Claim{
		AllocationID: alloc, NodeID: "n2", Mode: csi.ClaimWrite, AccessMode: snwFS.AccessMode, AttachmentMode: snwFS.AttachmentMode,
	}})
	d := time.Since(start)
	must(b, err)
	return d
}

// BenchmarkServer_AuthOverhead measures what trust costs a claim: a
// claim through the Server with an Authorizer and a mutual-TLS gRPC
// transport to the controller node, against the same claim with no
// Authorizer and an insecure transport, alternating in one run. Each
// claim makes a new attachment, so it crosses the transport
// (ControllerPublishVolume). auth-overhead is the ratio of the median
// claim times (goal ≤ 1.10); the TLS handshake happens once per
// connection, on the first claim.
//
//	go test ./rpcshim -run '^$' -bench AuthOverhead
func BenchmarkServer_AuthOverhead(b *testing.B) {
	open, secure := newGRPCClaimEnv(b, false), newGRPCClaimEnv(b, true)
	var openD, secureD []time.Duration
	i := 0
	for b.Loop() {
		i++
		if i%2 == 0 {
			openD = append(openD, open.claim(b, i))
			secureD = append(secureD, secure.claim(b, i))
		} else {
			secureD = append(secureD, secure.claim(b, i))
			openD = append(openD, open.claim(b, i))
		}
	}
	o, s := median(openD), median(secureD)
	b.ReportMetric(float64(o.Nanoseconds()), "ns/claim-open")
	b.ReportMetric(float64(s.Nanoseconds()), "ns/claim-secure")
	b.ReportMetric(float64(s)/float64(o), "auth-overhead")
}
