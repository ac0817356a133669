package sim

import (
	"context"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
)

// TestLifeInvariants_Flag checks that the life invariants hold on a
// fresh world and flag what they are for: a registered volume the
// plugin no longer has, a capacity below one seen before, a snapshot
// row whose plugin snapshot is gone, a check an operation flagged, and
// a claim and an attachment left on a node that is gone.
func TestLifeInvariants_Flag(t *testing.T) {
	p := newPlan(1, 0)
	w := newWorld(t, false)
	defer w.close()
	r := &run{w: w, p: p, allocs: map[string]decision{}, errs: map[string]int{}}
	r.registerVolumes()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	_, err := w.leader().server.CreateSnapshot(ctx, &rpcshim.SnapshotCreateRequest{Namespace: namespace, VolumeID: "v0", SnapshotID: "s1"})
	must(t, err)
	for name, inv := range map[string]invariant{"VolumesInPlugin": invVolumesInPlugin, "CapacityNeverShrinks": invCapacity,
		"SnapshotsMatchPlugin": invSnapshots, "LifeChecks": invLifeChecks, "GoneNodesReleased": invGoneReleased} {
		if bad := inv(r); len(bad) > 0 {
			t.Fatalf("%s fails on a fresh world: %v", name, bad)
		}
	}
	want := func(name string, inv invariant, substr string) {
		t.Helper()
		bad := inv(r)
		if len(bad) == 0 || !strings.Contains(strings.Join(bad, "\n"), substr) {
			t.Errorf("%s: got %q, want a line with %q", name, bad, substr)
		}
	}
	r.life.maxCap["v1"] = 1 << 40
	want("CapacityNeverShrinks", invCapacity, "volume v1 shrank")
	r.flag("a check failed")
	want("LifeChecks", invLifeChecks, "a check failed")
	snap, err := w.leader().store.VolumeSnapshot(namespace, "s1")
	must(t, err)
	if !w.ctl.RemoveVolume("ext-v0") {
		t.Fatal("the plugin had no volume ext-v0")
	}
	want("VolumesInPlugin", invVolumesInPlugin, "volume v0 is registered, but the plugin has no volume ext-v0")

	// Snapshots made and deleted behind csikit's back, over gRPC.
	conn, err := grpc.NewClient(w.ctl.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(t, err)
	defer conn.Close()
	c := csipb.NewControllerClient(conn)
	_, err = c.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{SourceVolumeId: "ext-v1", Name: "stray"})
	must(t, err)
	want("SnapshotsMatchPlugin", invSnapshots, "that no row records")
	_, err = c.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: snap.ExternalID})
	must(t, err)
	want("SnapshotsMatchPlugin", invSnapshots, "which the plugin does not have")

	// A node gone with nothing on it passes; a claim planted on it, with
	// the attachment the claim made, is flagged in the store and the
	// plugin.
	w.markGone("n3")
	if bad := invGoneReleased(r); len(bad) > 0 {
		t.Fatalf("GoneNodesReleased fails on a bare gone node: %v", bad)
	}
	_, err = r.claim(ctx, decision{kind: opClaim, alloc: "planted", vol: 1, node: "n2", mode: csi.ClaimRead})
	must(t, err)
	if bad := invGoneReleased(r); len(bad) > 0 {
		t.Fatalf("GoneNodesReleased flags a claim on a live node: %v", bad)
	}
	w.markGone("n2")
	want("GoneNodesReleased", invGoneReleased, "volume v1: claim of planted on gone node n2")
	want("GoneNodesReleased", invGoneReleased, "volume v1: attachment to gone node n2")
	want("GoneNodesReleased", invGoneReleased, "the plugin still attaches ext-v1 to gone node n2")
}

// markGone marks node id gone in the simulation's books only, so that
// what was left on it stays for invGoneReleased to find.
func (w *world) markGone(id string) {
	n := w.nodes[id]
	n.mu.Lock()
	n.gone = true
	n.mu.Unlock()
}
