package rpcshim_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// epPlugins is a node's controller plugin lookup over real plugin
// clients; tests that need the whole fingerprint manager use it instead
// (e2e_test.go).
type epPlugins struct {
	mu sync.Mutex
	m  map[string]epPlugin
}

type epPlugin struct {
	client plugin.ControllerClient
	info   *csi.PluginInfo
}

var _ rpcshim.ControllerPlugins = (*epPlugins)(nil)

func (p *epPlugins) set(id string, client plugin.ControllerClient, info *csi.PluginInfo) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = make(map[string]epPlugin)
	}
	p.m[id] = epPlugin{client, info}
}

func (p *epPlugins) ControllerPlugin(id string) (plugin.ControllerClient, *csi.PluginInfo, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.m[id]
	if !ok {
		return nil, nil, fmt.Errorf("%w: no controller plugin %q runs on this node", csi.ErrPluginNotFound, id)
	}
	return e.client, e.info.Copy(), nil
}

// epUnmounter records node detach requests and answers with err.
type epUnmounter struct {
	mu   sync.Mutex
	reqs []mounter.UnmountRequest
	err  error
}

func (u *epUnmounter) UnmountVolume(_ context.Context, req *mounter.UnmountRequest) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.reqs = append(u.reqs, *req)
	return u.err
}

func (u *epUnmounter) requests() []mounter.UnmountRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]mounter.UnmountRequest(nil), u.reqs...)
}

// newPluginClient connects a plugin client to a fake, without retries so
// that an injected Retryable failure reaches the test at once.
func newPluginClient(t testing.TB, p *csitest.Plugin) *plugin.Client {
	t.Helper()
	c, err := plugin.New(plugin.Config{Endpoint: p.Endpoint(), MaxRetries: -1})
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// allControllerCaps is every controller capability the router carries.
var allControllerCaps = csi.ControllerCapabilities{
	CreateDeleteVolume: true, PublishUnpublishVolume: true, ListVolumes: true,
	CreateDeleteSnapshot: true, ListSnapshots: true, ExpandVolume: true,
}

var (
	snwFS  = csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	mnmwFS = csi.Capability{AccessMode: csi.AccessModeMultiNodeMultiWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	mnroFS = csi.Capability{AccessMode: csi.AccessModeMultiNodeReaderOnly, AttachmentMode: csi.AttachmentModeFileSystem}
)

// srvEnv is a server and three nodes over the in-memory transport: n1
// runs the controller of plugin p1 (a csitest fake behind a real node
// endpoint); n2 and n3 run node instances (CSI node IDs csi-n2 and
// csi-n3) and answer node detach with a recording unmounter.
type srvEnv struct {
	t         testing.TB
	ctl       *csitest.Plugin
	store     *state.MemStore
	applier   *state.LocalApplier
	statuses  *rtStatuses
	tr        *rpcshim.InmemTransport
	router    *rpcshim.Router
	server    *rpcshim.Server
	plugins   *epPlugins
	unmounter *epUnmounter
}

func newSrvEnv(t testing.TB, caps csi.ControllerCapabilities) *srvEnv {
	t.Helper()
	e := &srvEnv{t: t, statuses: &rtStatuses{}, tr: rpcshim.NewInmemTransport(), plugins: &epPlugins{}, unmounter: &epUnmounter{}}
	e.ctl = csitest.Start(t, csitest.Config{Type: csi.PluginTypeController, Name: "fake.csikit.io", Controller: caps})
	ctrlInfo := &csi.PluginInfo{
		PluginID: rtPlugin, AllocationID: "ctl-1", Type: csi.PluginTypeController, Healthy: true, UpdateTime: rtTime,
		Provider: "fake.csikit.io", RequiresController: true,
		ControllerInfo: &csi.ControllerInfo{Capabilities: caps},
	}
	e.plugins.set(rtPlugin, newPluginClient(t, e.ctl), ctrlInfo)

	var err error
	e.store, err = state.NewMemStore(state.Config{})
	must(t, err)
	e.applier = state.NewLocalApplier(e.store)
	for _, id := range []string{"n1", "n2", "n3"} {
		ep, err := rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{NodeID: id, Plugins: e.pluginsOf(id), Mounter: e.unmounter})
		must(t, err)
		e.tr.Register(id, ep)
		e.statuses.Set(id, csi.NodeStatusReady)
	}
	e.apply(state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{*ctrlInfo}})
	for _, id := range []string{"n2", "n3"} {
		e.apply(state.UpsertNodePlugins{NodeID: id, Plugins: []csi.PluginInfo{{
			PluginID: rtPlugin, AllocationID: "node-" + id, Type: csi.PluginTypeNode, Healthy: true, UpdateTime: rtTime,
			Provider: "fake.csikit.io", RequiresController: true, NodeInfo: &csi.NodeInfo{ID: "csi-" + id},
		}}})
	}
	e.router, err = rpcshim.NewRouter(rpcshim.RouterConfig{Store: e.store, Transport: e.tr, NodeStatuses: e.statuses})
	must(t, err)
	e.server, err = rpcshim.NewServer(rpcshim.ServerConfig{Store: e.store, Applier: e.applier, Router: e.router})
	must(t, err)
	return e
}

// pluginsOf is the controller lookup of a node: n1 has the controller,
// the others none.
func (e *srvEnv) pluginsOf(id string) rpcshim.ControllerPlugins {
	if id == "n1" {
		return e.plugins
	}
	return &epPlugins{}
}

func (e *srvEnv) apply(cmd state.Command) state.Result {
	e.t.Helper()
	res, err := e.applier.Apply(context.Background(), cmd)
	must(e.t, err)
	return res
}

// allocs reports running allocations: id on node, in namespace default.
func (e *srvEnv) allocs(idNode ...string) {
	e.t.Helper()
	var as []csi.Allocation
	for i := 0; i+1 < len(idNode); i += 2 {
		as = append(as, csi.Allocation{ID: idNode[i], Namespace: "default", NodeID: idNode[i+1]})
	}
	e.apply(state.UpsertAllocations{Allocations: as})
}

// register adds an external volume to the fake and registers it.
func (e *srvEnv) register(id, external string, caps ...csi.Capability) *csi.Volume {
	e.t.Helper()
	e.ctl.AddVolume(external, 1<<30, map[string]string{"zone": "a"})
	resp, err := e.server.RegisterVolume(context.Background(), &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
		ID: id, Namespace: "default", PluginID: rtPlugin, ExternalID: external, Capabilities: caps,
		Secrets: csi.Secrets{"token": "s3cr3t"}, Context: map[string]string{"zone": "a"},
	}})
	must(e.t, err)
	return resp.Volume
}

func (e *srvEnv) claim(volID, allocID, node string, mode csi.ClaimMode, c csi.Capability) (*rpcshim.VolumeClaimResponse, error) {
	return e.server.Claim(context.Background(), &rpcshim.VolumeClaimRequest{
		Namespace: "default", VolumeID: volID,
		Claim: csi.Claim{AllocationID: allocID, NodeID: node, Mode: mode, AccessMode: c.AccessMode, AttachmentMode: c.AttachmentMode},
	})
}

func (e *srvEnv) volume(id string) *csi.Volume {
	e.t.Helper()
	v, err := e.store.Volume("default", id)
	must(e.t, err)
	return v
}

// publishedTo returns the CSI node IDs of the fake's ControllerPublish
// calls, in order.
func publishedTo(p *csitest.Plugin) []string {
	var out []string
	for _, c := range p.CallsTo(csitest.MethodControllerPublishVolume) {
		out = append(out, c.Request.(*csipb.ControllerPublishVolumeRequest).GetNodeId())
	}
	return out
}

// failApplier refuses the commands fail returns an error for and
// applies the others.
type failApplier struct {
	state.Applier
	fail func(state.Command) error
}

func (a failApplier) Apply(ctx context.Context, cmd state.Command) (state.Result, error) {
	if err := a.fail(cmd); err != nil {
		return state.Result{}, err
	}
	return a.Applier.Apply(ctx, cmd)
}

// serverWith is a Server on e's store and router whose writes go
// through fail first.
func (e *srvEnv) serverWith(t testing.TB, fail func(state.Command) error) *rpcshim.Server {
	t.Helper()
	srv, err := rpcshim.NewServer(rpcshim.ServerConfig{Store: e.store, Applier: failApplier{e.applier, fail}, Router: e.router})
	must(t, err)
	return srv
}
