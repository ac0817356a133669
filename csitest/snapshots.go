// snapshots.go holds the fake's snapshot RPCs (CreateSnapshot,
// DeleteSnapshot, ListSnapshots, GetSnapshot), their readiness model
// (Config.SnapshotReadyAfter and SnapshotReadyDelay), AddSnapshot, and
// the lifecycle rules about snapshots.

package csitest

import (
	"context"
	"maps"
	"slices"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// Snapshot rules of the lifecycle checker.
const (
	// RuleSnapshotMissingVolume: CreateSnapshot of a source volume the
	// CO itself deleted. The call fails with NotFound. A source the
	// plugin never had is only NotFound: a harness probing the error
	// code asks for one on purpose.
	RuleSnapshotMissingVolume = "snapshot-of-missing-volume"
	// RuleRestoreNotReady: CreateVolume from a snapshot not yet
	// reported ready_to_use. The call fails with Unavailable, which a
	// CO retries.
	RuleRestoreNotReady = "restore-from-unready-snapshot"
)

// snapshotReadiness is when a new snapshot becomes ready_to_use.
type snapshotReadiness struct {
	after int
	delay time.Duration
}

// answerLocked is the proto of sn for one reply: it counts the reply
// and decides readiness. p.mu is held.
func (p *Plugin) answerLocked(sn *snapshot) *csipb.Snapshot {
	if !sn.ready {
		sn.answers++
		sn.ready = sn.answers > p.snapReady.after && !p.clock.Now().Before(sn.created.Add(p.snapReady.delay))
	}
	return &csipb.Snapshot{
		SnapshotId:     sn.id,
		SourceVolumeId: sn.source,
		SizeBytes:      sn.size,
		CreationTime:   timestamp(sn.created),
		ReadyToUse:     sn.ready,
	}
}

// checkRestoreLocked refuses a CreateVolume from a snapshot that is
// not ready (RuleRestoreNotReady). p.mu is held.
func (p *Plugin) checkRestoreLocked(src *csipb.VolumeContentSource) error {
	id := src.GetSnapshot().GetSnapshotId()
	if sn := p.snapshots[id]; sn != nil && !sn.ready {
		p.violateLocked(MethodCreateVolume, "", RuleRestoreNotReady, "snapshot %q is not ready_to_use yet", id)
		return errorf(codes.Unavailable, MethodCreateVolume, "snapshot %q is not ready to use yet; retry later", id)
	}
	return nil
}

// AddSnapshot puts a ready snapshot of volume source in the model as if
// it had been made outside the CO, and returns its ID. source need not
// exist (a snapshot outlives its volume).
func (p *Plugin) AddSnapshot(name, source string, size int64) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.snapshotSeq++
	sn := &snapshot{id: seqID("snap", p.snapshotSeq), name: name, source: source, size: size, created: p.clock.Now(), ready: true}
	p.snapshots[sn.id] = sn
	return sn.id
}

func (s controllerServer) CreateSnapshot(_ context.Context, req *csipb.CreateSnapshotRequest) (*csipb.CreateSnapshotResponse, error) {
	const m = MethodCreateSnapshot
	src, name := req.GetSourceVolumeId(), req.GetName()
	if err := requireFields(m, "source_volume_id", src, "name", name); err != nil {
		return nil, err
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, sn := range p.snapshots {
		if sn.name != name {
			continue
		}
		if sn.source != src {
			return nil, errorf(codes.AlreadyExists, m, "snapshot named %q exists as %q of volume %q; use another name", name, sn.id, sn.source)
		}
		return &csipb.CreateSnapshotResponse{Snapshot: p.answerLocked(sn)}, nil
	}
	v := p.volumes[src]
	if v == nil {
		if p.deleted[src] {
			p.violateLocked(m, src, RuleSnapshotMissingVolume, "snapshot %q of a volume the CO deleted", name)
		}
		return nil, errorf(codes.NotFound, m, "source volume %q does not exist", src)
	}
	p.snapshotSeq++
	sn := &snapshot{id: seqID("snap", p.snapshotSeq), name: name, source: src, size: v.capacity, created: p.clock.Now()}
	p.snapshots[sn.id] = sn
	return &csipb.CreateSnapshotResponse{Snapshot: p.answerLocked(sn)}, nil
}

// DeleteSnapshot is idempotent, as the spec requires: a snapshot that
// does not exist answers OK.
func (s controllerServer) DeleteSnapshot(_ context.Context, req *csipb.DeleteSnapshotRequest) (*csipb.DeleteSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if err := requireFields(MethodDeleteSnapshot, "snapshot_id", id); err != nil {
		return nil, err
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.snapshots, id)
	return &csipb.DeleteSnapshotResponse{}, nil
}

func (s controllerServer) ListSnapshots(_ context.Context, req *csipb.ListSnapshotsRequest) (*csipb.ListSnapshotsResponse, error) {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for _, id := range slices.Sorted(maps.Keys(p.snapshots)) {
		sn := p.snapshots[id]
		if (req.GetSnapshotId() == "" || id == req.GetSnapshotId()) &&
			(req.GetSourceVolumeId() == "" || sn.source == req.GetSourceVolumeId()) {
			ids = append(ids, id)
		}
	}
	ids, next, err := page(MethodListSnapshots, ids, req.GetMaxEntries(), req.GetStartingToken())
	if err != nil {
		return nil, err
	}
	resp := &csipb.ListSnapshotsResponse{NextToken: next}
	for _, id := range ids {
		resp.Entries = append(resp.Entries, &csipb.ListSnapshotsResponse_Entry{Snapshot: p.answerLocked(p.snapshots[id])})
	}
	return resp, nil
}

func (s controllerServer) GetSnapshot(_ context.Context, req *csipb.GetSnapshotRequest) (*csipb.GetSnapshotResponse, error) {
	const m = MethodGetSnapshot
	id := req.GetSnapshotId()
	if err := requireFields(m, "snapshot_id", id); err != nil {
		return nil, err
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	sn := p.snapshots[id]
	if sn == nil {
		return nil, errorf(codes.NotFound, m, "snapshot %q does not exist", id)
	}
	return &csipb.GetSnapshotResponse{Snapshot: p.answerLocked(sn)}, nil
}
