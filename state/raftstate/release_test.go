package raftstate_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/claimgc"
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/fingerprint"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
	"github.com/csikit/csikit/state/raftstate"
)

// crashApplier is a server's applier as its claim worker sees it. Once
// armed, the first NodeDetached checkpoint it applies makes it stop the
// server, and the worker with it, before the worker can go on to the
// controller step: the leader crashing right after the checkpoint.
type crashApplier struct {
	srv   *raftstate.Server
	armed *atomic.Bool
	crash func()
}

var _ state.Applier = (*crashApplier)(nil)

func (a *crashApplier) Apply(ctx context.Context, cmd state.Command) (state.Result, error) {
	res, err := a.srv.Apply(ctx, cmd)
	if err == nil && nodeDetached(cmd) && a.armed.CompareAndSwap(true, false) {
		a.crash()
		return state.Result{}, fmt.Errorf("test: the server stopped right after the checkpoint: %w", raft.ErrRaftShutdown)
	}
	return res, err
}

func nodeDetached(cmd state.Command) bool {
	switch c := cmd.(type) {
	case state.CheckpointClaim:
		return c.State == csi.ClaimNodeDetached
	case state.Batch:
		for _, in := range c.Commands {
			if nodeDetached(in) {
				return true
			}
		}
	}
	return false
}

// releaseServer is one server's release side: its router and claim
// worker over its own store and raft applier.
type releaseServer struct {
	m      *member
	router *rpcshim.Router
	worker *claimgc.Worker
	cancel context.CancelFunc
	done   chan error
}

// TestServer_OnLeadership_ReleaseResumesOnNewLeader stops the leader right after
// its claim worker checkpointed NodeDetached. The new leader's worker
// resumes at the controller step: the plugin sees one NodeUnpublish and
// one ControllerUnpublish for the claim, and the claim is freed.
func TestServer_OnLeadership_ReleaseResumesOnNewLeader(t *testing.T) {
	ctx := waitCtx(t)
	c := newCluster(t, clusterOpts{forward: true})

	// The node agent on n1: a monolith plugin that attaches through
	// ControllerPublish and stages before it publishes, its fingerprint
	// manager reporting to the cluster, its mounter and node endpoint.
	plugin := csitest.Start(t, csitest.Config{
		Type: csi.PluginTypeMonolith, Name: "hostpath.csikit.io", NodeID: "csi-n1",
		Controller: csi.ControllerCapabilities{PublishUnpublishVolume: true},
		Node:       csi.NodeCapabilities{StageUnstageVolume: true},
	})
	plugin.AddVolume("ext-data", 1<<30, nil)
	manager, err := fingerprint.New(fingerprint.Config{
		NodeID: "n1",
		Report: func(ctx context.Context, infos []*csi.PluginInfo) error {
			cmd := state.UpsertNodePlugins{NodeID: "n1"}
			for _, in := range infos {
				cmd.Plugins = append(cmd.Plugins, *in)
			}
			srv := c.anyUp()
			if srv == nil {
				return fmt.Errorf("%w: no server up", csi.ErrUnavailable)
			}
			_, err := srv.Apply(ctx, cmd) // forwarded to the leader
			return err
		},
		Interval: time.Hour,
	})
	must(t, err)
	must(t, manager.Register(fingerprint.Instance{PluginID: testPlugin, AllocationID: "plugin-n1", Type: csi.PluginTypeMonolith, Socket: plugin.Endpoint()}))
	runManager(t, manager)
	dir := t.TempDir()
	mnt, err := mounter.New(mounter.Config{Root: filepath.Join(dir, "mnt"), StateDir: filepath.Join(dir, "state"), Plugins: manager, NoSync: true})
	must(t, err)
	endpoint, err := rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{NodeID: "n1", Plugins: manager, Mounter: mnt})
	must(t, err)
	transport := rpcshim.NewInmemTransport()
	transport.Register("n1", endpoint)
	statuses := &rpcshim.InmemNodeStatuses{}
	statuses.Set("n1", csi.NodeStatusReady)

	// Every server: a router and a claim worker on its own store, the
	// worker writing through the server and enabled while it leads.
	var armed atomic.Bool
	crashed := make(chan string, 1)
	servers := map[string]*releaseServer{}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	for _, m := range c.members {
		rs := &releaseServer{m: m, done: make(chan error, 1)}
		rs.router, err = rpcshim.NewRouter(rpcshim.RouterConfig{Store: m.store, Transport: transport, NodeStatuses: statuses})
		must(t, err)
		applier := &crashApplier{srv: m.srv, armed: &armed, crash: func() {
			rs.cancel()
			c.stop(m)
			crashed <- m.id
		}}
		rs.worker, err = claimgc.New(claimgc.Config{
			Store: m.store, Applier: applier, Nodes: rs.router, Controllers: rs.router, NodeStatuses: statuses,
		})
		must(t, err)
		var runCtx context.Context
		runCtx, rs.cancel = context.WithCancel(context.Background())
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs.done <- rs.worker.Run(runCtx)
		}()
		t.Cleanup(rs.cancel)
		m.srv.OnLeadership(rs.worker.SetEnabled)
		servers[m.id] = rs
	}

	// Claim and mount through the leader.
	first := c.leader()
	waitPlugin(t, first.store)
	host, err := rpcshim.NewServer(rpcshim.ServerConfig{Store: first.store, Applier: first.srv, Router: servers[first.id].router})
	must(t, err)
	apply(t, first.srv, allocsCmd("web-1"))
	_, err = host.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
		ID: "data", Namespace: "default", PluginID: testPlugin, ExternalID: "ext-data", Capabilities: []csi.Capability{snw},
	}})
	must(t, err)
	claim := claimCmd("data", "web-1").Claim
	r, err := host.Claim(ctx, &rpcshim.VolumeClaimRequest{Namespace: "default", VolumeID: "data", Claim: claim})
	must(t, err)
	req, err := mounter.NewMountRequest(r.Volume, r.Claim)
	must(t, err)
	_, err = mnt.MountVolume(ctx, req)
	must(t, err)

	// The workload stops; the leader's worker runs the node step and
	// checkpoints, and the leader stops.
	armed.Store(true)
	apply(t, first.srv, state.UpsertAllocations{ReleasedAt: testTime, Allocations: []csi.Allocation{
		{ID: "web-1", Namespace: "default", NodeID: "n1", Terminal: true},
	}})
	select {
	case id := <-crashed:
		expectEqual(t, id, first.id)
	case <-ctx.Done():
		t.Fatalf("the leader's worker never checkpointed NodeDetached: %v", ctx.Err())
	}
	if err := <-servers[first.id].done; err != nil {
		t.Errorf("the stopped leader's worker: %v", err)
	}

	// The new leader's worker finishes the release.
	next := c.leader()
	waitFreed(t, next.store)
	rs := servers[next.id]
	must(t, rs.worker.Settle(ctx))
	for _, f := range c.followers(next) {
		waitIndexes(t, f.store, indexes(t, next.store))
		v, err := f.store.Volume("default", "data")
		must(t, err)
		if v.InUse() {
			t.Errorf("server %s still holds the claim: %+v", f.id, v.PastClaims)
		}
	}
	stats := rs.worker.Stats()
	expectEqual(t, [3]uint64{stats.NodeDetached, stats.ControllerDetached, stats.Freed}, [3]uint64{0, 1, 1})
	old := servers[first.id].worker.Stats()
	expectEqual(t, [2]uint64{old.ControllerDetached, old.Freed}, [2]uint64{0, 0})

	// The plugin's log: one of each call, in lifecycle order.
	for _, method := range []string{
		csitest.MethodControllerPublishVolume, csitest.MethodNodeStageVolume, csitest.MethodNodePublishVolume,
		csitest.MethodNodeUnpublishVolume, csitest.MethodNodeUnstageVolume, csitest.MethodControllerUnpublishVolume,
	} {
		if n := plugin.CallCount(method); n != 1 {
			t.Errorf("%s called %d times, want once", method, n)
		}
	}
	plugin.RequireSequence(t, csitest.MethodControllerPublishVolume, csitest.MethodNodeStageVolume, csitest.MethodNodePublishVolume,
		csitest.MethodNodeUnpublishVolume, csitest.MethodNodeUnstageVolume, csitest.MethodControllerUnpublishVolume)
	unpub := plugin.CallsTo(csitest.MethodControllerUnpublishVolume)
	expectEqual(t, unpub[0].Request.(*csipb.ControllerUnpublishVolumeRequest).GetNodeId(), "csi-n1")
	plugin.RequireNoViolations(t)
	if st, ok := plugin.Volume("ext-data"); !ok || st.InUse() || len(st.AttachedNodes()) != 0 {
		t.Errorf("the plugin still holds the volume: %+v", st)
	}
}

func runManager(t *testing.T, m *fingerprint.Manager) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("fingerprint manager: %v", err)
		}
	})
}

// waitPlugin blocks on store until the fingerprint has made the plugin
// healthy, with its controller.
func waitPlugin(t *testing.T, store *state.MemStore) {
	t.Helper()
	ctx := waitCtx(t)
	for {
		idx, err := store.Index(state.TablePlugins)
		must(t, err)
		if p, err := store.Plugin(testPlugin); err == nil && p.ControllerRequired && p.ControllersHealthy == 1 && p.NodesHealthy == 1 {
			return
		}
		if _, err := store.Wait(ctx, state.TablePlugins, idx); err != nil {
			t.Fatalf("waiting for the plugin's fingerprint: %v", err)
		}
	}
}

// waitFreed blocks on store until volume default/data has no claim.
func waitFreed(t *testing.T, store *state.MemStore) {
	t.Helper()
	ctx := waitCtx(t)
	for {
		idx, err := store.Index(state.TableVolumes)
		must(t, err)
		v, err := store.Volume("default", "data")
		must(t, err)
		if !v.InUse() {
			return
		}
		if _, err := store.Wait(ctx, state.TableVolumes, idx); err != nil {
			t.Fatalf("waiting for the claim to be freed (claims %+v): %v", v.PastClaims, err)
		}
	}
}
