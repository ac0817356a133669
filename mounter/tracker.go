package mounter

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/csikit/csikit/csi"
)

// formatVersion is the version of the volumeRecord this package
// writes into the state database (store.go). Version 3 is also what the
// slot files held; version 2 files hold the same record, version 1
// files stages keyed by the full usage (upgraded in memory); New imports
// them (import.go). A record of any other version is refused
// (StateError), never guessed at.
const formatVersion = 3

// stageState is where the staging of a volume under one stage usage
// stands. The empty state means the plugin does not stage (publish only).
type stageState string

const (
	stageNone stageState = ""
	// stageStaging: NodeStageVolume is being called, or its outcome is
	// unknown (an Uncertain or Retryable error); the volume may be
	// staged.
	stageStaging stageState = "staging"
	// stageStaged: NodeStageVolume succeeded.
	stageStaged stageState = "staged"
	// stageUnstaging: NodeUnstageVolume is being called or failed; the
	// volume may still be staged.
	stageUnstaging stageState = "unstaging"
)

// publishState is where the publication for one allocation stands. Every
// state means "may be published": a record is dropped only once the
// plugin has confirmed the volume is not published there, or refused to
// publish it with a Final error.
type publishState string

const (
	// publishPublishing: NodePublishVolume is being called, or its
	// outcome is unknown (an Uncertain or Retryable error).
	publishPublishing publishState = "publishing"
	// publishPublished: NodePublishVolume succeeded.
	publishPublished publishState = "published"
	// publishUnpublishing: NodeUnpublishVolume is being called or failed.
	publishUnpublishing publishState = "unpublishing"
)

// volumeRecord is the tracker's record of one volume on this node, and
// the value of its key in the state database.
//
// The record on disk is always at least as pessimistic as the truth:
// every change that widens what may be staged or published (an intent)
// is committed, synced, before the plugin call (store.save); changes
// that narrow it (a confirmed success, a confirmed teardown) are
// committed after it (store.note), and a failure to write them is only
// logged. A state read after a crash therefore never forgets a mount,
// and at worst makes the next call repeat an idempotent plugin call. A
// failed mount's withdrawn publish intent must be durable
// (Mounter.settle): no later write of the host's would carry it.
//
// The invariants, which the Mounter keeps and the crash tests check:
//
//   - Before NodeStageVolume, the synced record says "staging" for the
//     stage and "publishing" for the allocation whose mount stages it:
//     both intents go in one write, as the publish follows at once. If
//     the agent dies between the two calls, the publish intent of a
//     NodePublishVolume that never ran is undone like any other: by
//     NodeUnpublishVolume, which a plugin answers OK or NotFound (done)
//     for a target it never published.
//   - Before NodePublishVolume, the synced record says "publishing" for
//     the allocation, and the stage is "staging" or "staged".
//   - Before UnmountVolume calls anything, the synced record says
//     "unpublishing" for the allocations it tears down and "unstaging"
//     for a stage it unstages. This write is also what makes the
//     unmount's success durable: once it has returned, no crash can
//     bring back a record listing the allocation as a live user.
//   - Before a mount tears down an unused stage (finishStages), the
//     synced record says "unstaging": a restarted agent must not take
//     an unstaged volume for staged.
//   - A volume that tracks nothing has its key deleted: brought back
//     (the delete lost), its last record holds only teardowns that were
//     done.
type volumeRecord struct {
	Version    int
	Namespace  string
	VolumeID   string
	ExternalID string
	PluginID   string
	// Stages maps a stage usage to its stage and the publications made
	// from it. The Mounter never stages a volume under a second stage
	// usage while one has users, so at most one entry has a stage state
	// (a file upgraded from version 1 may hold more, which drain as
	// their users unmount); entries without a stage state hold the
	// publications of a plugin that does not stage.
	Stages map[StageUsage]*stageRecord
}

// stageRecord tracks the stage of a volume under one stage usage and the
// allocations published from it.
type stageRecord struct {
	Stage       stageState `json:",omitempty"`
	StagingPath string     `json:",omitempty"`
	// Writers and Readers map an allocation ID to its publication:
	// read-write for a write claim, read-only for a read claim.
	Writers map[string]*allocRecord `json:",omitempty"`
	Readers map[string]*allocRecord `json:",omitempty"`
}

type allocRecord struct {
	State      publishState
	TargetPath string
}

// pubRef names one publication of a stage.
type pubRef struct {
	mode  csi.ClaimMode
	alloc string
	rec   *allocRecord
}

// pub returns the publication of an allocation under a claim mode, or
// nil.
func (s *stageRecord) pub(mode csi.ClaimMode, allocID string) *allocRecord {
	if mode == csi.ClaimRead {
		return s.Readers[allocID]
	}
	return s.Writers[allocID]
}

// setPub records a publication; a nil one deletes it.
func (s *stageRecord) setPub(mode csi.ClaimMode, allocID string, a *allocRecord) {
	m := &s.Writers
	if mode == csi.ClaimRead {
		m = &s.Readers
	}
	if a == nil {
		delete(*m, allocID)
		return
	}
	if *m == nil {
		*m = map[string]*allocRecord{}
	}
	(*m)[allocID] = a
}

// users counts the stage's publications, whatever their state.
func (s *stageRecord) users() int { return len(s.Writers) + len(s.Readers) }

// publications returns the stage's publications in a stable order:
// writers, then readers, each by allocation ID.
func (s *stageRecord) publications() []pubRef {
	out := make([]pubRef, 0, s.users())
	for _, mode := range []csi.ClaimMode{csi.ClaimWrite, csi.ClaimRead} {
		m := s.Writers
		if mode == csi.ClaimRead {
			m = s.Readers
		}
		for _, id := range slices.Sorted(maps.Keys(m)) {
			out = append(out, pubRef{mode: mode, alloc: id, rec: m[id]})
		}
	}
	return out
}

// liveUsers describes the publications that are not being torn down,
// for an error message: "a1 (w-snw-fs)".
func (s *stageRecord) liveUsers(sk StageUsage) []string {
	var out []string
	for _, p := range s.publications() {
		if p.rec.State != publishUnpublishing {
			out = append(out, fmt.Sprintf("%s (%s)", p.alloc, sk.Usage(p.mode)))
		}
	}
	return out
}

func (s *stageRecord) clone() *stageRecord {
	if s == nil {
		return nil
	}
	c := *s
	c.Writers, c.Readers = cloneAllocs(s.Writers), cloneAllocs(s.Readers)
	return &c
}

func cloneAllocs(m map[string]*allocRecord) map[string]*allocRecord {
	if m == nil {
		return nil
	}
	c := make(map[string]*allocRecord, len(m))
	for id, a := range m {
		ac := *a
		c[id] = &ac
	}
	return c
}

func (r *volumeRecord) clone() *volumeRecord {
	if r == nil {
		return nil
	}
	c := *r
	c.Stages = make(map[StageUsage]*stageRecord, len(r.Stages))
	for k, s := range r.Stages {
		c.Stages[k] = s.clone()
	}
	return &c
}

// empty reports whether the record tracks nothing that may be staged or
// published.
func (r *volumeRecord) empty() bool { return r == nil || len(r.Stages) == 0 }

// sortedStages returns the record's stage usages in a stable order.
func (r *volumeRecord) sortedStages() []StageUsage {
	ks := slices.Collect(maps.Keys(r.Stages))
	slices.SortFunc(ks, func(a, b StageUsage) int { return strings.Compare(a.String(), b.String()) })
	return ks
}

// prune drops stages with nothing left.
func (r *volumeRecord) prune() {
	for k, s := range r.Stages {
		if s.Stage == stageNone && s.users() == 0 {
			delete(r.Stages, k)
		}
	}
}

// check validates a record read from disk as the record of (namespace,
// volumeID). A version 1 or 2 file is named after its volume, and the
// record must agree with the name; a record in the database or a slot
// file names its volume itself, so the store passes the record's own
// names (after validating them) and only the rest is checked.
func (r *volumeRecord) check(namespace, volumeID string) error {
	if r.Version != formatVersion {
		return fmt.Errorf("format version %d is not the version %d this build writes", r.Version, formatVersion)
	}
	if r.Namespace != namespace || r.VolumeID != volumeID {
		return fmt.Errorf("holds volume %q in namespace %q, but its name says volume %q in namespace %q", r.VolumeID, r.Namespace, volumeID, namespace)
	}
	if err := csi.ValidatePluginID(r.PluginID); err != nil {
		return err
	}
	if err := csi.ValidateExternalID("external volume ID", r.ExternalID); err != nil {
		return err
	}
	if len(r.Stages) == 0 {
		return fmt.Errorf("tracks no stage (an empty record is never written)")
	}
	for sk, s := range r.Stages {
		if s == nil {
			return fmt.Errorf("stage %s has no record", sk)
		}
		switch s.Stage {
		case stageNone:
			if s.StagingPath != "" {
				return fmt.Errorf("stage %s has a staging path but no stage state", sk)
			}
			if s.users() == 0 {
				return fmt.Errorf("stage %s tracks nothing", sk)
			}
		case stageStaging, stageStaged, stageUnstaging:
			if err := checkPath(s.StagingPath); err != nil {
				return fmt.Errorf("stage %s: staging path: %w", sk, err)
			}
		default:
			return fmt.Errorf("stage %s has unknown stage state %q", sk, s.Stage)
		}
		if len(s.Writers) > 0 && sk.AccessMode.ReadOnly() {
			return fmt.Errorf("stage %s has writers but a read-only access mode", sk)
		}
		for _, p := range s.publications() {
			usage := sk.Usage(p.mode)
			if err := csi.ValidateAllocationID(p.alloc); err != nil {
				return fmt.Errorf("usage %s: %w", usage, err)
			}
			if p.rec == nil {
				return fmt.Errorf("usage %s: allocation %s has no record", usage, p.alloc)
			}
			switch p.rec.State {
			case publishPublishing, publishPublished, publishUnpublishing:
			default:
				return fmt.Errorf("usage %s: allocation %s has unknown publish state %q", usage, p.alloc, p.rec.State)
			}
			if err := checkPath(p.rec.TargetPath); err != nil {
				return fmt.Errorf("usage %s: allocation %s: target path: %w", usage, p.alloc, err)
			}
		}
	}
	return nil
}

// checkPath accepts a clean absolute path.
func checkPath(p string) error {
	if p == "" || !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("%q is not a clean absolute path", p)
	}
	return nil
}

// volumeRecordV1 is the format-1 record: one stage per full usage, so
// the readers and the writers of a volume had separate staging paths.
type volumeRecordV1 struct {
	Version    int
	Namespace  string
	VolumeID   string
	ExternalID string
	PluginID   string
	Usages     map[Usage]*usageRecordV1
}

type usageRecordV1 struct {
	Stage       stageState              `json:",omitempty"`
	StagingPath string                  `json:",omitempty"`
	Allocations map[string]*allocRecord `json:",omitempty"`
}

// upgrade turns a format-1 record into the current format: the usages
// that share a stage usage are merged into one stage. It fails when two
// of them may both be staged, at two paths, which the current format
// cannot hold.
func (r *volumeRecordV1) upgrade() (*volumeRecord, error) {
	out := &volumeRecord{
		Version:    formatVersion,
		Namespace:  r.Namespace,
		VolumeID:   r.VolumeID,
		ExternalID: r.ExternalID,
		PluginID:   r.PluginID,
		Stages:     map[StageUsage]*stageRecord{},
	}
	usages := slices.SortedFunc(maps.Keys(r.Usages), func(a, b Usage) int { return strings.Compare(a.String(), b.String()) })
	staged := map[StageUsage]Usage{}
	for _, usage := range usages {
		u := r.Usages[usage]
		if u == nil {
			return nil, fmt.Errorf("usage %s has no record", usage)
		}
		sk := usage.StageUsage()
		s := out.Stages[sk]
		if s == nil {
			s = &stageRecord{}
			out.Stages[sk] = s
		}
		if u.Stage != stageNone || u.StagingPath != "" {
			if other, dup := staged[sk]; dup {
				return nil, fmt.Errorf("usages %s and %s of the volume may both be staged, at %s and %s; this version stages a volume at one path per node and cannot take them over: unmount their allocations with the csikit version that wrote the file (or by hand) first",
					other, usage, s.StagingPath, u.StagingPath)
			}
			staged[sk] = usage
			s.Stage, s.StagingPath = u.Stage, u.StagingPath
		}
		for id, a := range u.Allocations {
			if a == nil {
				return nil, fmt.Errorf("usage %s: allocation %s has no record", usage, id)
			}
			s.setPub(usage.ClaimMode, id, a)
		}
	}
	return out, nil
}
