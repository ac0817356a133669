package raftstate_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
	"github.com/csikit/csikit/state/raftstate"
)

// Three servers on raft's in-memory transport form a cluster by
// bootstrap-expect, write through the leader and read on a follower. A
// real host gives each server raftstate.NewTCPTransport and a DataDir,
// and leaves Config.Raft nil.
func Example() {
	ctx := context.Background()
	check := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	ids := []string{"s1", "s2", "s3"}
	transports := map[string]*raft.InmemTransport{}
	for _, id := range ids {
		_, transports[id] = raft.NewInmemTransport(raft.ServerAddress(id))
	}
	for _, a := range ids {
		for _, b := range ids {
			transports[a].Connect(raft.ServerAddress(b), transports[b])
		}
	}

	servers := map[string]*raftstate.Server{}
	stores := map[string]*state.MemStore{}
	leaders := make(chan string, 8)
	for _, id := range ids {
		store, err := state.NewMemStore(state.Config{})
		check(err)
		// Short timeouts so the example elects quickly.
		conf := raft.DefaultConfig()
		conf.HeartbeatTimeout, conf.ElectionTimeout = 100*time.Millisecond, 100*time.Millisecond
		conf.LeaderLeaseTimeout, conf.CommitTimeout = 100*time.Millisecond, 5*time.Millisecond
		srv, err := raftstate.New(raftstate.Config{
			ID: id, Store: store, Transport: transports[id], InMemory: true, BootstrapExpect: 3, Raft: conf,
		})
		check(err)
		check(srv.Start())
		defer srv.Shutdown()
		// A host passes its claim worker's SetEnabled here.
		srv.OnLeadership(func(leader bool) {
			if leader {
				leaders <- id
			}
		})
		servers[id], stores[id] = srv, store
	}

	// Each server learns the others (from flags or discovery); the
	// cluster forms once they know all three.
	for _, id := range ids {
		for _, peer := range ids {
			check(servers[id].Join(servers[peer].Self()))
		}
	}
	leaderID := <-leaders
	leader := servers[leaderID]
	peers, err := leader.Servers()
	check(err)
	fmt.Println("cluster of", len(peers), "servers")

	apply := func(cmd state.Command) state.Result {
		res, err := leader.Apply(ctx, cmd)
		check(err)
		return res
	}
	apply(state.UpsertNodePlugins{NodeID: "node-1", Plugins: []csi.PluginInfo{{
		PluginID: "hostpath", Type: csi.PluginTypeMonolith, Healthy: true, Provider: "hostpath.example.io",
		UpdateTime:     time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		ControllerInfo: &csi.ControllerInfo{}, NodeInfo: &csi.NodeInfo{ID: "csi-node-1"},
	}}})
	apply(state.UpsertAllocations{Allocations: []csi.Allocation{{ID: "web-1", Namespace: "default", NodeID: "node-1"}}})
	capab := csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	apply(state.RegisterVolume{Volume: csi.Volume{
		ID: "db", Namespace: "default", PluginID: "hostpath", ExternalID: "disk-7", Capabilities: []csi.Capability{capab},
	}})
	res := apply(state.ClaimVolume{Namespace: "default", VolumeID: "db", Claim: csi.Claim{
		AllocationID: "web-1", NodeID: "node-1", Mode: csi.ClaimWrite, AccessMode: capab.AccessMode, AttachmentMode: capab.AttachmentMode,
	}})

	// Every follower applies the claim at the same raft index.
	for _, id := range ids {
		if id == leaderID {
			continue
		}
		check(servers[id].FSM().WaitApplied(ctx, res.Index))
		v, err := stores[id].Volume("default", "db")
		check(err)
		fmt.Println("follower holds the claim at the leader's index:", v.ModifyIndex == res.Index, v.WriteClaims["web-1"].ExternalNodeID)

		// Without Config.Forward, a follower refuses writes and names
		// the leader.
		_, err = servers[id].Apply(ctx, state.DeleteNode{NodeID: "node-9"})
		var nl *raftstate.NotLeaderError
		fmt.Println("follower write refused:", errors.Is(err, raftstate.ErrNotLeader), errors.As(err, &nl) && nl.LeaderID == leaderID)
	}
	// Output:
	// cluster of 3 servers
	// follower holds the claim at the leader's index: true csi-node-1
	// follower write refused: true true
	// follower holds the claim at the leader's index: true csi-node-1
	// follower write refused: true true
}
