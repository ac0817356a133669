package rpcshim_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/fingerprint"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// xpCluster is a server and three node agents on the in-memory
// transport: each node runs a csitest node plugin, a fingerprint
// manager, a mounter and a node endpoint; n1 also runs the controller
// fake. Plugin clients do not retry, so the Server's own retries, on
// the fake clock, are what a test sees.
type xpCluster struct {
	store    *state.MemStore
	applier  *state.LocalApplier
	statuses *rpcshim.InmemNodeStatuses
	tr       *rpcshim.InmemTransport
	router   *rpcshim.Router
	server   *rpcshim.Server
	clock    *clock.Fake
	ctl      *csitest.Plugin
	nodes    map[string]*e2eNode
}

// xpConfig chooses the fakes' expansion capabilities.
type xpConfig struct {
	controllerExpand bool // the controller advertises EXPAND_VOLUME
	nodeExpand       bool // the nodes advertise EXPAND_VOLUME
	offline          bool // OFFLINE instead of ONLINE
	modify           bool // the controller advertises MODIFY_VOLUME
	// stats names the nodes whose plugin advertises GET_VOLUME_STATS
	// and VOLUME_CONDITION.
	stats map[string]bool
}

func newXPCluster(t *testing.T, cfg xpConfig) *xpCluster {
	t.Helper()
	store, err := state.NewMemStore(state.Config{})
	must(t, err)
	c := &xpCluster{
		store: store, applier: state.NewLocalApplier(store), statuses: &rpcshim.InmemNodeStatuses{},
		tr: rpcshim.NewInmemTransport(), clock: clock.NewFake(rtTime), nodes: make(map[string]*e2eNode),
	}
	t.Cleanup(func() { _ = c.tr.Close() })
	ctlCaps := csi.ControllerCapabilities{PublishUnpublishVolume: true, ExpandVolume: cfg.controllerExpand, ModifyVolume: cfg.modify}
	// The controller fake answers node_expansion_required when it
	// advertises node expansion itself, as a split plugin's controller
	// knows its node binary does.
	c.ctl = csitest.Start(t, csitest.Config{
		Type: csi.PluginTypeController, Name: e2eProvider, Controller: ctlCaps, OfflineExpansion: cfg.offline,
		Node: csi.NodeCapabilities{ExpandVolume: cfg.nodeExpand},
	})
	for _, id := range []string{"n1", "n2", "n3"} {
		c.nodes[id] = c.startNode(t, id, cfg)
	}
	c.router, err = rpcshim.NewRouter(rpcshim.RouterConfig{Store: store, Transport: c.tr, NodeStatuses: c.statuses})
	must(t, err)
	c.server = c.newServer(t)
	waitPlugin(t, store, func(p *csi.Plugin) bool { return p.ControllersHealthy == 1 && p.NodesHealthy == 3 })
	return c
}

// newServer returns a Server on the cluster's store, as a new leader
// would build it.
func (c *xpCluster) newServer(t *testing.T) *rpcshim.Server {
	t.Helper()
	s, err := rpcshim.NewServer(rpcshim.ServerConfig{Store: c.store, Applier: c.applier, Router: c.router, Clock: c.clock})
	must(t, err)
	return s
}

func (c *xpCluster) startNode(t *testing.T, id string, cfg xpConfig) *e2eNode {
	t.Helper()
	n := &e2eNode{id: id}
	n.plugin = csitest.Start(t, csitest.Config{
		Type: csi.PluginTypeMonolith, Name: e2eProvider, NodeID: "csi-" + id, OfflineExpansion: cfg.offline,
		Node: csi.NodeCapabilities{StageUnstageVolume: true, ExpandVolume: cfg.nodeExpand,
			GetVolumeStats: cfg.stats[id], GetVolumeHealth: cfg.stats[id]}, AdmitUnknownVolumes: true,
	})
	var err error
	n.manager, err = fingerprint.New(fingerprint.Config{
		NodeID: id,
		Report: func(ctx context.Context, infos []*csi.PluginInfo) error {
			cmd := state.UpsertNodePlugins{NodeID: id}
			for _, in := range infos {
				cmd.Plugins = append(cmd.Plugins, *in)
			}
			_, err := c.applier.Apply(ctx, cmd)
			return err
		},
		Interval: time.Hour,
		Client:   plugin.Config{MaxRetries: -1},
	})
	must(t, err)
	must(t, n.manager.Register(fingerprint.Instance{PluginID: rtPlugin, AllocationID: "plugin-node-" + id, Type: csi.PluginTypeNode, Socket: n.plugin.Endpoint()}))
	if id == "n1" {
		must(t, n.manager.Register(fingerprint.Instance{PluginID: rtPlugin, AllocationID: "plugin-ctl-n1", Type: csi.PluginTypeController, Socket: c.ctl.Endpoint()}))
	}
	runManager(t, n.manager)
	dir := shortTempDir(t)
	n.mounter, err = mounter.New(mounter.Config{Root: filepath.Join(dir, "mnt"), StateDir: filepath.Join(dir, "state"), Plugins: n.manager, NoSync: true})
	must(t, err)
	t.Cleanup(func() { _ = n.mounter.Close() })
	ep, err := rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{NodeID: id, Plugins: n.manager, Mounter: n.mounter})
	must(t, err)
	c.tr.Register(id, ep)
	c.statuses.Set(id, csi.NodeStatusReady)
	return n
}

// volume registers default/data (1 MiB, multi-node-multi-writer) on
// the controller fake and in csikit.
func (c *xpCluster) volume(t *testing.T) {
	t.Helper()
	c.ctl.AddVolume("ext-1", 1<<20, nil)
	_, err := c.server.RegisterVolume(t.Context(), &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
		ID: "data", Namespace: "default", PluginID: rtPlugin, ExternalID: "ext-1", Capacity: 1 << 20,
		Capabilities: []csi.Capability{mnmwFS}, Secrets: csi.Secrets{"token": "s3cr3t"},
	}})
	must(t, err)
}

// claimAndMount claims default/data for alloc on node and mounts it
// there, as the node agent does.
func (c *xpCluster) claimAndMount(t *testing.T, alloc, node string) {
	t.Helper()
	ctx := t.Context()
	_, err := c.applier.Apply(ctx, state.UpsertAllocations{Allocations: []csi.Allocation{{ID: alloc, Namespace: "default", NodeID: node}}})
	must(t, err)
	r, err := c.server.Claim(ctx, &rpcshim.VolumeClaimRequest{Namespace: "default", VolumeID: "data", Claim: csi.Claim{
		AllocationID: alloc, NodeID: node, Mode: csi.ClaimWrite, AccessMode: mnmwFS.AccessMode, AttachmentMode: mnmwFS.AttachmentMode,
	}})
	must(t, err)
	req, err := mounter.NewMountRequest(r.Volume, r.Claim)
	must(t, err)
	mi, err := c.nodes[node].mounter.MountVolume(ctx, req)
	must(t, err)
	// A mount that ran the pending node expansion reports it, as the
	// node agent does.
	if x := req.NodeExpansion; x != nil && mi.NodeExpandedBytes > 0 {
		must(t, c.server.NodeExpandedAtMount(ctx, &rpcshim.NodeExpandedRequest{
			Namespace: "default", VolumeID: "data", NodeID: node,
			RequiredBytes: x.RequiredBytes, LimitBytes: x.LimitBytes, Capacity: mi.NodeExpandedBytes,
		}))
	}
}

func (c *xpCluster) expand(t *testing.T, size int64) (*rpcshim.VolumeChangeResponse, error) {
	t.Helper()
	return c.server.ExpandVolume(t.Context(), &rpcshim.VolumeExpandRequest{Namespace: "default", VolumeID: "data", RequiredBytes: size})
}

func (c *xpCluster) stored(t *testing.T) *csi.Volume {
	t.Helper()
	v, err := c.store.Volume("default", "data")
	must(t, err)
	return v
}

// nodeExpands counts NodeExpandVolume calls per node.
func (c *xpCluster) nodeExpands() map[string]int {
	out := map[string]int{}
	for id, n := range c.nodes {
		if k := n.plugin.CallCount(csitest.MethodNodeExpandVolume); k > 0 {
			out[id] = k
		}
	}
	return out
}

// noViolations fails the test on any lifecycle violation of the fakes.
func (c *xpCluster) noViolations(t *testing.T) {
	t.Helper()
	c.ctl.RequireNoViolations(t)
	for _, n := range c.nodes {
		n.plugin.RequireNoViolations(t)
	}
}
