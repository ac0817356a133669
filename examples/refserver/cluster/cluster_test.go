package cluster_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/rpcshim"
)

// TestServer_Run_FailoverAndRestart runs three servers over TCP on
// loopback with two node agents, and through the CLI:
//   - creates and claims (with a mount) a volume through the followers,
//     whose writes are forwarded to the leader, and reads it back the
//     same on all three;
//   - restarts a follower from its data dir: it shows the same volumes;
//   - stops the leader: a new one is elected and its claim worker takes
//     over; a release made after the failover is carried out by it
//     through the agents (unmount on node-2, detach through node-1's
//     controller) and the claim is freed;
//   - restarts the old leader from its data dir: it catches up and shows
//     the same volumes as the others.
func TestServer_Run_FailoverAndRestart(t *testing.T) {
	c := startCluster(t)
	c.startAgents()
	leader := c.leaders.wait(t, c.ids...)
	followers := c.others(leader)
	f1, f2 := followers[0], followers[1]
	requireLine(t, c.members[leader].events.String(), "[server] leading: the claim release worker is on")

	// Writes through the followers, forwarded to the leader.
	var created rpcshim.VolumeResponse
	must(t, json.Unmarshal([]byte(c.cli(f1, "volume", "create", "-plugin", "hostpath", "-secret", "token=cluster-secret", "-json", "vol1")), &created))
	if created.Volume == nil || created.Volume.ExternalID == "" || created.Index == 0 {
		t.Fatalf("volume created through follower %s: %+v", f1, created)
	}
	// The follower that took the write reads it back at once; another
	// server shows it once its replica has applied it.
	requireLine(t, c.cli(f1, "volume", "status", "vol1"), "External ID   "+created.Volume.ExternalID)
	c.volumesAt(f2, created.Index)
	// The write's time through raft is in the metrics of the server
	// that took it.
	if m := scrapeMetrics(t, c.members[f1].url()); !strings.Contains(m, `csikit_raft_apply_latency_count{kind="register-volume",result="ok"}`) {
		t.Errorf("no raft apply latency in %s's /v1/metrics:\n%s", f1, m)
	}
	var claim api.ClaimResponse
	must(t, json.Unmarshal([]byte(c.cli(f2, "claim", "-volume", "vol1", "-alloc", "web-1", "-node", "node-2", "-mount", "-json")), &claim))
	if claim.Mount == nil || claim.ControllerNodeID != "node-1" || claim.Claim.State != csi.ClaimTaken {
		t.Fatalf("claim through follower %s: %+v, want it attached by node-1 and mounted on node-2", f2, claim)
	}
	if _, err := os.Lstat(claim.Mount.Path); err != nil {
		t.Fatalf("the mount on node-2: %v", err)
	}
	claimed := c.sameVolumes(leader, f1, f2)
	if !strings.Contains(claimed, `"web-1"`) || strings.Contains(claimed, "cluster-secret") {
		t.Fatalf("volumes after the claim (want web-1's claim, no secret):\n%s", claimed)
	}
	if !strings.Contains(c.cli(f2, "volume", "status", "vol1"), "web-1       node-2  write  taken") {
		t.Errorf("volume status on %s:\n%s", f2, c.cli(f2, "volume", "status", "vol1"))
	}

	// A follower restarted from its data dir has the same state.
	c.stopServer(f1)
	before := len(c.members[f1].events.String())
	c.restartServer(f1)
	if got := c.sameVolumes(leader, f1); got != claimed {
		t.Errorf("follower %s restarted from its data dir shows:\n%s\nbefore it stopped:\n%s", f1, got, claimed)
	}
	restarted := c.members[f1].events.String()[before:]
	requireLine(t, restarted, "[server] server "+f1+": raft state found in ")
	requireLine(t, restarted, "[server] joined server "+leader)
	// Its node liveness starts empty; the agents' next heartbeat
	// registers them again (the test sends it rather than wait for it).
	for id, ra := range c.agents {
		if err := ra.a.Heartbeat(waitCtx(t)); err != nil {
			t.Fatalf("agent %s heartbeat: %v", id, err)
		}
	}
	requireLine(t, c.agentEvents.String(), "registered again with "+c.members[f1].url())

	// Stop the leader: one of the others takes over, claim worker too.
	c.stopServer(leader)
	newLeader := c.leaders.wait(t, f1, f2)
	requireLine(t, c.members[newLeader].events.String(), "[server] leading: the claim release worker is on")
	survivor := c.others(leader, newLeader)[0]

	// A release started after the failover, through the follower.
	out := c.cli(survivor, "release", "-wait", "web-1")
	requireLine(t, out, "web-1")
	for _, id := range []string{newLeader, survivor} {
		if err := c.members[id].client.WaitReleased(waitCtx(t), "web-1"); err != nil {
			t.Fatalf("server %s: the claim of web-1 is not freed: %v\n%s", id, err, describe(c))
		}
	}
	if st := c.members[newLeader].srv.Server().WorkerStats(); st.Freed != 1 || st.NodeDetached != 1 || st.ControllerDetached != 1 {
		t.Errorf("the new leader's claim worker: %+v, want the claim node-detached, controller-detached and freed by it", st)
	}
	if st := c.members[survivor].srv.Server().WorkerStats(); st.Freed != 0 || st.Enabled {
		t.Errorf("the follower's claim worker: %+v, want it off", st)
	}
	agents := c.agentEvents.String()
	requireLine(t, agents, "[node-2] NodeUnpublishVolume ok")
	requireLine(t, agents, "[node-2] NodeUnstageVolume ok")
	requireLine(t, agents, "[node-1] ControllerUnpublishVolume ok")
	if mounted, err := c.agents["node-2"].a.Mounter().HasMount(waitCtx(t), "default", "vol1", "web-1"); err != nil || mounted {
		t.Errorf("node-2 still has vol1 mounted for web-1 (%v)", err)
	}
	if _, err := os.Lstat(claim.Mount.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the mount path %s is still there: %v", claim.Mount.Path, err)
	}

	// The old leader restarted from its data dir catches up.
	released := c.sameVolumes(newLeader, survivor)
	c.restartServer(leader)
	if got := c.sameVolumes(newLeader, leader); got != released {
		t.Errorf("the old leader %s restarted shows:\n%s\nthe others:\n%s", leader, got, released)
	}
	if strings.Contains(released, `"web-1"`) {
		t.Errorf("web-1's claim is still listed:\n%s", released)
	}
	var st api.ServerStatus
	must(t, json.Unmarshal([]byte(c.cli(leader, "cluster", "status", "-json")), &st))
	if len(st.Servers) != 3 || st.Leader || st.LeaderID != newLeader {
		t.Errorf("the old leader's status: %+v, want 3 servers led by %s", st, newLeader)
	}
	for _, s := range st.Servers {
		if s.APIAddress == "" {
			t.Errorf("the old leader does not know server %s's API address: %+v", s.ID, st)
		}
	}
	if strings.Contains(describe(c), "cluster-secret") {
		t.Errorf("the volume's secret was printed:\n%s", describe(c))
	}
	for _, id := range c.ids {
		expectNoFileHolds(t, filepath.Join(c.dir, id), "cluster-secret")
	}
}

// TestNew_ID: a server started without an ID keeps
// the one it generated in its data dir.
func TestNew_ID(t *testing.T) {
	dir := t.TempDir()
	cfg := clusterConfig(dir)
	s1, err := newServer(cfg)
	must(t, err)
	b, err := os.ReadFile(filepath.Join(dir, "server-id"))
	must(t, err)
	if strings.TrimSpace(string(b)) != s1.ID() || !strings.HasPrefix(s1.ID(), "server-") {
		t.Fatalf("ID %q, file %q", s1.ID(), b)
	}
	s2, err := newServer(cfg)
	must(t, err)
	if s2.ID() != s1.ID() {
		t.Errorf("second start: ID %q, want %q", s2.ID(), s1.ID())
	}
	cfg.ID = "other"
	if _, err := newServer(cfg); !errors.Is(err, csi.ErrInvalidRequest) || !strings.Contains(err.Error(), "belongs to server "+s1.ID()) {
		t.Errorf("another ID on the same data dir: %v", err)
	}
}
