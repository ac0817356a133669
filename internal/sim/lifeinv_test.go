package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
)

// liveNodes are the nodes that have not left the cluster.
func (w *world) liveNodes() []string {
	var out []string
	for _, id := range simNodes {
		if !w.isGone(id) {
			out = append(out, id)
		}
	}
	return out
}

// invLifeChecks reports, once, what the life operations found wrong
// as they ran (a claim admitted on a deleted volume or a gone node, a
// restored volume without its source, a claim lost across a kill).
func invLifeChecks(r *run) []string {
	r.life.mu.Lock()
	defer r.life.mu.Unlock()
	bad := r.life.bad
	r.life.bad = nil
	return bad
}

// invVolumesInPlugin: every volume the store has registered exists in
// the controller plugin (a delete never leaves a registered volume the
// plugin deleted).
func invVolumesInPlugin(r *run) []string {
	vols, err := r.w.leader().store.Volumes(namespace, "")
	if err != nil {
		return []string{fmt.Sprintf("list the volumes: %v", err)}
	}
	var bad []string
	for _, v := range vols {
		if v.Creating {
			continue
		}
		if _, ok := r.w.ctl.Volume(v.ExternalID); !ok {
			bad = append(bad, fmt.Sprintf("volume %s is registered, but the plugin has no volume %s", v.ID, v.ExternalID))
		}
	}
	return bad
}

// invCapacity: a volume's recorded capacity never shrinks, and the
// plugin's volume is never smaller than the record.
func invCapacity(r *run) []string {
	vols, err := r.w.leader().store.Volumes(namespace, "")
	if err != nil {
		return []string{fmt.Sprintf("list the volumes: %v", err)}
	}
	r.life.mu.Lock()
	defer r.life.mu.Unlock()
	if r.life.maxCap == nil {
		r.life.maxCap = map[string]int64{}
	}
	var bad []string
	for _, v := range vols {
		if prev := r.life.maxCap[v.ID]; v.Capacity < prev {
			bad = append(bad, fmt.Sprintf("volume %s shrank from %d to %d bytes", v.ID, prev, v.Capacity))
		}
		r.life.maxCap[v.ID] = max(r.life.maxCap[v.ID], v.Capacity)
		if st, ok := r.w.ctl.Volume(v.ExternalID); ok && st.Capacity < v.Capacity {
			bad = append(bad, fmt.Sprintf("volume %s records %d bytes, the plugin holds %d", v.ID, v.Capacity, st.Capacity))
		}
	}
	return bad
}

// invSnapshots: every snapshot row that is not an intent matches the
// plugin's snapshot (its source and size), and every snapshot the
// plugin holds has a row, or is the work of an intent still open.
func invSnapshots(r *run) []string {
	if r.w.ctl.CallCount(csitest.MethodCreateSnapshot) == 0 {
		return nil
	}
	rows, err := r.w.leader().store.Snapshots(namespace)
	if err != nil {
		return []string{fmt.Sprintf("list the snapshots: %v", err)}
	}
	var bad []string
	known, open := map[string]bool{}, 0
	for _, s := range rows {
		if s.Creating || s.Deleting {
			open++
			continue
		}
		known[s.ExternalID] = true
		ps, ok := r.w.ctl.Snapshot(s.ExternalID)
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("snapshot %s records plugin snapshot %s, which the plugin does not have", s.ID, s.ExternalID))
		case ps.SourceVolumeID != s.SourceExternalID:
			bad = append(bad, fmt.Sprintf("snapshot %s records source %s, the plugin %s", s.ID, s.SourceExternalID, ps.SourceVolumeID))
		case s.Size != 0 && ps.Size != s.Size:
			bad = append(bad, fmt.Sprintf("snapshot %s records %d bytes, the plugin %d", s.ID, s.Size, ps.Size))
		}
	}
	ids, err := r.pluginSnapshots()
	if err != nil {
		return append(bad, fmt.Sprintf("list the plugin's snapshots: %v", err))
	}
	var unknown []string
	for _, id := range ids {
		if !known[id] {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > open {
		slices.Sort(unknown)
		bad = append(bad, fmt.Sprintf("the plugin holds snapshots %s that no row records (%d intents open)", strings.Join(unknown, ", "), open))
	}
	return bad
}

// pluginSnapshots lists the controller plugin's snapshots, again only
// once a CreateSnapshot or DeleteSnapshot reached it since the last
// list.
func (r *run) pluginSnapshots() ([]string, error) {
	calls := r.w.ctl.CallCount(csitest.MethodCreateSnapshot) + r.w.ctl.CallCount(csitest.MethodDeleteSnapshot)
	r.life.mu.Lock()
	defer r.life.mu.Unlock()
	if r.life.listed == calls {
		return r.life.snaps, nil
	}
	ids, err := listSnapshots(r.w.ctl)
	if err == nil {
		r.life.listed, r.life.snaps = calls, ids
	}
	return ids, err
}

// listSnapshots lists a controller plugin's snapshots over gRPC.
func listSnapshots(p *csitest.Plugin) ([]string, error) {
	conn, err := grpc.NewClient(p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	c := csipb.NewControllerClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	var ids []string
	for token := ""; ; {
		resp, err := c.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{StartingToken: token})
		if err != nil {
			return nil, err
		}
		for _, e := range resp.GetEntries() {
			ids = append(ids, e.GetSnapshot().GetSnapshotId())
		}
		if token = resp.GetNextToken(); token == "" {
			return ids, nil
		}
	}
}

// invGoneReleased: nothing is claimed on a node that left, or attached
// to it, in the store or the plugin.
func invGoneReleased(r *run) []string {
	var bad []string
	held := r.w.ctl.Attachments()
	for _, id := range simNodes {
		if !r.w.isGone(id) {
			continue
		}
		for _, v := range r.volumes() {
			for _, m := range []map[string]*csi.Claim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
				for alloc, c := range m {
					if c.NodeID == id {
						bad = append(bad, fmt.Sprintf("volume %s: claim of %s on gone node %s left in state %s", v.ID, alloc, id, c.State))
					}
				}
			}
			if a := v.Attachments[id]; a != nil {
				bad = append(bad, fmt.Sprintf("volume %s: attachment to gone node %s left %s", v.ID, id, a.State))
			}
		}
		for vol, nodes := range held {
			if slices.Contains(nodes, "csi-"+id) {
				bad = append(bad, fmt.Sprintf("the plugin still attaches %s to gone node %s", vol, id))
			}
		}
	}
	slices.Sort(bad)
	return bad
}
