package rpcshim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// nopTransport answers every call at once, so a routed call costs only
// the router's own work.
type nopTransport struct{}

func (nopTransport) Call(context.Context, string, string, any, any) error { return nil }

// benchRouter builds a router over a store of n nodes that all run the
// node plugin, three of which also run its controller.
func benchRouter(b *testing.B, n int) *rpcshim.Router {
	b.Helper()
	store, err := state.NewMemStore(state.Config{})
	must(b, err)
	applier := state.NewLocalApplier(store)
	statuses := &rpcshim.InmemNodeStatuses{}
	ctx := context.Background()
	for i := range n {
		id := fmt.Sprintf("node-%05d", i)
		plugins := []csi.PluginInfo{rtNodeInstance(id)}
		if i%(n/3) == 1 {
			plugins = append(plugins, rtControllerInstance(true, ""))
		}
		if _, err := applier.Apply(ctx, state.UpsertNodePlugins{NodeID: id, Plugins: plugins}); err != nil {
			b.Fatal(err)
		}
		statuses.Set(id, csi.NodeStatusReady)
	}
	r, err := rpcshim.NewRouter(rpcshim.RouterConfig{Store: store, Transport: nopTransport{}, NodeStatuses: statuses})
	must(b, err)
	return r
}

// BenchmarkRouter_ChooseController measures what the router does to
// send one ControllerPublish (attach lock, healthy controllers from the
// store's index, order, readiness, sticky bookkeeping) with 10 and with
// 10,000 nodes in the store; the transport answers at once. The figure
// that matters is route-10k-vs-10: the candidate lookup reads the
// plugin's controller index, so it should stay near 1 (goal: at most 2).
func BenchmarkRouter_ChooseController(b *testing.B) {
	small, large := benchRouter(b, 10), benchRouter(b, 10_000)
	ctx := context.Background()
	req := rtPublishRequest("", "csi-n9")
	for _, r := range []*rpcshim.Router{small, large} { // warm the sticky node
		if _, err := r.ControllerPublish(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	var tSmall, tLarge time.Duration
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		if _, err := small.ControllerPublish(ctx, req); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := large.ControllerPublish(ctx, req); err != nil {
			b.Fatal(err)
		}
		tLarge += time.Since(t1)
		tSmall += t1.Sub(t0)
	}
	b.ReportMetric(float64(tSmall.Nanoseconds())/float64(b.N), "ns/route-10")
	b.ReportMetric(float64(tLarge.Nanoseconds())/float64(b.N), "ns/route-10k")
	b.ReportMetric(float64(tLarge)/float64(tSmall), "route-10k-vs-10")
}

// BenchmarkRouter_ControllerPublish compares one ControllerPublish sent
// through the router, the gRPC transport over a unix socket and a node
// endpoint, with the same call made straight to the plugin with the
// plugin client the endpoint uses. attach-grpc-vs-direct is the price of
// routing a controller call through a node.
func BenchmarkRouter_ControllerPublish(b *testing.B) {
	e := newSrvEnv(b, allControllerCaps)
	e.ctl.AddVolume("vol-1", 1<<30, nil)
	ep, err := rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{NodeID: "n1", Plugins: e.plugins, Mounter: e.unmounter})
	must(b, err)
	book := &addrBook{}
	book.set("n1", serveGRPCNode(b, ep).target)
	router, err := rpcshim.NewRouter(rpcshim.RouterConfig{Store: e.store, Transport: newGRPCTransport(b, book), NodeStatuses: e.statuses})
	must(b, err)
	direct, _, err := e.plugins.ControllerPlugin(rtPlugin)
	must(b, err)

	ctx := context.Background()
	req := rtPublishRequestFor("vol-1", "csi-n2")
	for range 2 { // connect both paths outside the timing
		if _, err := router.ControllerPublish(ctx, req); err != nil {
			b.Fatal(err)
		}
		if _, err := direct.ControllerPublishVolume(ctx, &req.ControllerPublishRequest); err != nil {
			b.Fatal(err)
		}
	}
	var tRouted, tDirect time.Duration
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		if _, err := router.ControllerPublish(ctx, req); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := direct.ControllerPublishVolume(ctx, &req.ControllerPublishRequest); err != nil {
			b.Fatal(err)
		}
		tDirect += time.Since(t1)
		tRouted += t1.Sub(t0)
	}
	b.ReportMetric(float64(tRouted.Nanoseconds())/float64(b.N), "ns/attach-grpc")
	b.ReportMetric(float64(tDirect.Nanoseconds())/float64(b.N), "ns/attach-direct")
	b.ReportMetric(float64(tRouted)/float64(tDirect), "attach-grpc-vs-direct")
}
