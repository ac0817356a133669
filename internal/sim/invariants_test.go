package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
)

// An invariant returns what is wrong with the world, one line each;
// none means it holds. The caller prefixes the seed.
type invariant func(r *run) []string

// stepInvariants hold after every step.
var stepInvariants = []struct {
	name string
	fn   invariant
}{
	{"SingleWriterPublishedOnce", invSingleWriter},
	{"PluginAttachmentsHaveRecords", invAttachmentsRecorded},
	{"PublishedIsAttached", invPublishedIsAttached},
	{"LiveClaimsHaveAttachments", invLiveClaimsAttached},
	{"NoLifecycleViolations", invLifecycle},
	{"NoPublishAfterRelease", invNoPublishAfterRelease},
	{"LifeChecks", invLifeChecks},
	{"VolumesInPlugin", invVolumesInPlugin},
	{"CapacityNeverShrinks", invCapacity},
	{"SnapshotsMatchPlugin", invSnapshots},
	{"HealthMatchesPlugin", invHealthMatches},
}

// quiescentInvariants hold once every allocation has stopped and the
// claim worker has finished.
var quiescentInvariants = []struct {
	name string
	fn   invariant
}{
	{"ClaimsFreed", invClaimsFreed},
	{"NothingLeftOnNodes", invNothingOnNodes},
	{"NothingLeftAttached", invNothingAttached},
	{"ReplicasIdentical", invReplicasIdentical},
	{"NoLifecycleViolations", invLifecycle},
	{"NoPublishAfterRelease", invNoPublishAfterRelease},
	{"GoneNodesReleased", invGoneReleased},
	{"LifeChecks", invLifeChecks},
	{"VolumesInPlugin", invVolumesInPlugin},
	{"CapacityNeverShrinks", invCapacity},
	{"SnapshotsMatchPlugin", invSnapshots},
	{"HealthMatchesPlugin", invHealthQuiescent},
}

func (r *run) volumes() []*csi.Volume {
	var out []*csi.Volume
	store := r.w.leader().store
	for _, sv := range r.p.volumes {
		v, err := store.Volume(namespace, sv.id)
		if sv.id == r.p.volumes[lifeVolume].id && errors.Is(err, csi.ErrVolumeNotFound) {
			continue // deleted, and registering it again failed: LifeChecks says so
		}
		if err != nil {
			r.w.t.Fatalf("seed %d: volume %s lost: %v", r.p.seed, sv.id, err)
		}
		out = append(out, v)
	}
	return out
}

// invSingleWriter: a volume of a single-writer mode is published for
// writing at most once, over all nodes; SINGLE_NODE_SINGLE_WRITER at
// most once at all; a single-node mode on one node only.
func invSingleWriter(r *run) []string {
	var bad []string
	for _, sv := range r.p.volumes {
		var writers, all []string
		nodes := map[string]bool{}
		for _, id := range r.w.liveNodes() {
			st, ok := r.w.nodes[id].plugin.Volume("ext-" + sv.id)
			if !ok {
				continue
			}
			for target, pub := range st.Published {
				all = append(all, id+":"+target)
				nodes[id] = true
				if !pub.Readonly {
					writers = append(writers, id+":"+target)
				}
			}
		}
		slices.Sort(writers)
		slices.Sort(all)
		switch m := sv.mode; {
		case m == csi.AccessModeSingleNodeSingleWriter && len(all) > 1:
			bad = append(bad, fmt.Sprintf("volume %s (%s) published %d times: %s", sv.id, m, len(all), strings.Join(all, ", ")))
		case (m == csi.AccessModeSingleNodeWriter || m == csi.AccessModeMultiNodeSingleWriter) && len(writers) > 1:
			bad = append(bad, fmt.Sprintf("volume %s (%s) published for writing %d times: %s", sv.id, m, len(writers), strings.Join(writers, ", ")))
		case m.SingleNode() && len(nodes) > 1:
			bad = append(bad, fmt.Sprintf("volume %s (%s) published on %d nodes: %s", sv.id, m, len(nodes), strings.Join(all, ", ")))
		}
	}
	return bad
}

// invAttachmentsRecorded: every attachment the controller plugin holds
// has a record in the store, and every record Attached is held.
func invAttachmentsRecorded(r *run) []string {
	var bad []string
	held := r.w.ctl.Attachments()
	for _, v := range r.volumes() {
		nodes := held["ext-"+v.ID]
		for _, csiNode := range nodes {
			node := strings.TrimPrefix(csiNode, "csi-")
			if v.Attachments[node] == nil {
				bad = append(bad, fmt.Sprintf("the plugin attaches volume %s to %s, the store has no record of it", v.ID, node))
			}
		}
		for node, a := range v.Attachments {
			if a.State == csi.AttachmentAttached && !slices.Contains(nodes, "csi-"+node) {
				bad = append(bad, fmt.Sprintf("volume %s is recorded attached to %s, the plugin does not attach it there", v.ID, node))
			}
		}
	}
	return bad
}

// invLifecycle: no plugin's lifecycle checker saw a violation.
func invLifecycle(r *run) []string {
	var bad []string
	plugins := map[string]*csitest.Plugin{"ctl": r.w.ctl}
	for id, n := range r.w.nodes {
		plugins[id] = n.plugin
	}
	for name, p := range plugins {
		for _, v := range p.Violations() {
			bad = append(bad, fmt.Sprintf("plugin %s: %s", name, v))
		}
	}
	slices.Sort(bad)
	return bad
}

// invClaimsFreed: every stopped allocation's claims are freed.
func invClaimsFreed(r *run) []string {
	var bad []string
	for _, v := range r.volumes() {
		for _, m := range []map[string]*csi.Claim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
			for id, c := range m {
				bad = append(bad, fmt.Sprintf("volume %s: claim of %s on %s left in state %s (%s)", v.ID, id, c.NodeID, c.State, c.LastError))
			}
		}
	}
	slices.Sort(bad)
	return bad
}

// invNothingOnNodes: no node plugin has anything staged or published.
func invNothingOnNodes(r *run) []string {
	var bad []string
	for _, id := range r.w.liveNodes() {
		for _, st := range r.w.nodes[id].plugin.Volumes() {
			if len(st.Staged)+len(st.Published) > 0 {
				bad = append(bad, fmt.Sprintf("node %s: volume %s still staged %d times and published %d times", id, st.ID, len(st.Staged), len(st.Published)))
			}
		}
	}
	return bad
}

// invNothingAttached: neither the plugin nor the store attaches any
// volume.
func invNothingAttached(r *run) []string {
	var bad []string
	for vol, nodes := range r.w.ctl.Attachments() {
		if len(nodes) > 0 {
			bad = append(bad, fmt.Sprintf("the plugin still attaches %s to %v", vol, nodes))
		}
	}
	for _, v := range r.volumes() {
		for node, a := range v.Attachments {
			bad = append(bad, fmt.Sprintf("volume %s: attachment to %s left %s", v.ID, node, a.State))
		}
	}
	slices.Sort(bad)
	return bad
}

// invReplicasIdentical: once every replica has applied the leader's
// last index, their snapshots are byte-identical.
func invReplicasIdentical(r *run) []string {
	ctx, cancel := r.ctx()
	defer cancel()
	for {
		idx := r.w.leader().srv.FSM().AppliedIndex()
		snaps := map[string][]byte{}
		reps := r.w.reps()
		for _, rep := range reps {
			if err := rep.srv.FSM().WaitApplied(ctx, idx); err != nil {
				return []string{fmt.Sprintf("replica %s did not reach index %d: %v", rep.id, idx, err)}
			}
			var buf bytes.Buffer
			if err := rep.store.Snapshot(context.Background(), &buf); err != nil {
				return []string{fmt.Sprintf("snapshot of %s: %v", rep.id, err)}
			}
			snaps[rep.id] = buf.Bytes()
		}
		moved := false
		for _, rep := range reps {
			moved = moved || rep.srv.FSM().AppliedIndex() != idx
		}
		if moved {
			continue // a late write (a fingerprint, a retry) landed meanwhile
		}
		var bad []string
		first := reps[0].id
		for _, rep := range reps[1:] {
			if !bytes.Equal(snaps[first], snaps[rep.id]) {
				bad = append(bad, fmt.Sprintf("replica %s's snapshot differs from %s's at index %d", rep.id, first, idx))
			}
		}
		return bad
	}
}

// invPublishedIsAttached: a volume published on a node is attached to
// it by the controller, so every live claim's attachment is held and
// no detach pulls a volume from under a mount.
func invPublishedIsAttached(r *run) []string {
	var bad []string
	held := r.w.ctl.Attachments()
	for _, sv := range r.p.volumes {
		for _, id := range r.w.liveNodes() {
			st, ok := r.w.nodes[id].plugin.Volume("ext-" + sv.id)
			if ok && len(st.Published)+len(st.Staged) > 0 && !slices.Contains(held["ext-"+sv.id], "csi-"+id) {
				bad = append(bad, fmt.Sprintf("volume %s is staged or published on %s (%d publications) but not attached there", sv.id, id, len(st.Published)))
			}
		}
	}
	return bad
}

// invLiveClaimsAttached: every live claim has an attachment record on
// its node that is not being detached.
func invLiveClaimsAttached(r *run) []string {
	var bad []string
	for _, v := range r.volumes() {
		for _, m := range []map[string]*csi.Claim{v.ReadClaims, v.WriteClaims} {
			for id, c := range m {
				switch a := v.Attachments[c.NodeID]; {
				case a == nil:
					bad = append(bad, fmt.Sprintf("volume %s: live claim of %s on %s has no attachment record", v.ID, id, c.NodeID))
				case a.State == csi.AttachmentDetaching:
					bad = append(bad, fmt.Sprintf("volume %s: live claim of %s on %s, whose attachment is being detached", v.ID, id, c.NodeID))
				}
			}
		}
	}
	slices.Sort(bad)
	return bad
}
