package mounter

import (
	"cmp"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/csikit/csikit/csi"
)

// formatVersion is the version of the volumeRecord this package writes;
// New imports versions 1 and 2 (import.go) and refuses any other.
const formatVersion = 3

// stageState is where a stage stands; empty: the plugin does not stage.
type stageState string

const (
	stageNone      stageState = ""
	stageStaging   stageState = "staging" // being called, or outcome unknown: may be staged
	stageStaged    stageState = "staged"
	stageUnstaging stageState = "unstaging" // being called, or failed: may still be staged
)

// publishState is where a publication stands. Every state means "may
// be published": a publication is dropped only once the plugin has
// confirmed that it is gone, or refused it with a Final error.
type publishState string

const (
	publishPublishing   publishState = "publishing" // being called, or outcome unknown
	publishPublished    publishState = "published"
	publishUnpublishing publishState = "unpublishing" // being called, or failed
)

// volumeRecord is the tracker's record of one volume on this node, the
// value of its key in the state database, always at least as
// pessimistic as the truth (see the package doc).
type volumeRecord struct {
	Version                                   int
	Namespace, VolumeID, ExternalID, PluginID string
	// Stages maps a stage usage to its stage and the publications made
	// from it. The Mounter never stages a volume under a second stage
	// usage while one has users, so at most one entry has a stage state
	// (a version 1 record may hold more, which drain as their users
	// unmount); entries without one hold the publications of a plugin
	// that does not stage.
	Stages map[StageUsage]*stageRecord
}

// stageRecord tracks a stage and the allocations published from it, by
// ID: writers read-write, readers read-only.
type stageRecord struct {
	Stage            stageState              `json:",omitempty"`
	StagingPath      string                  `json:",omitempty"`
	Writers, Readers map[string]*allocRecord `json:",omitempty"`
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

func (r *volumeRecord) key() volKey { return volKey{r.Namespace, r.VolumeID} }

func (s *stageRecord) pubs(mode csi.ClaimMode) *map[string]*allocRecord {
	if mode == csi.ClaimRead {
		return &s.Readers
	}
	return &s.Writers
}

func (s *stageRecord) pub(mode csi.ClaimMode, allocID string) *allocRecord {
	return (*s.pubs(mode))[allocID]
}

// setPub records a publication; a nil one deletes it.
func (s *stageRecord) setPub(mode csi.ClaimMode, allocID string, a *allocRecord) {
	m := s.pubs(mode)
	switch {
	case a == nil:
		delete(*m, allocID)
	case *m == nil:
		*m = map[string]*allocRecord{allocID: a}
	default:
		(*m)[allocID] = a
	}
}

func (s *stageRecord) users() int { return len(s.Writers) + len(s.Readers) }

// publications returns the stage's publications: writers, then
// readers, each by allocation ID.
func (s *stageRecord) publications() []pubRef {
	out := make([]pubRef, 0, s.users())
	for _, mode := range []csi.ClaimMode{csi.ClaimWrite, csi.ClaimRead} {
		m := *s.pubs(mode)
		for _, id := range slices.Sorted(maps.Keys(m)) {
			out = append(out, pubRef{mode: mode, alloc: id, rec: m[id]})
		}
	}
	return out
}

// liveUsers lists the publications not being torn down: "a1 (w-snw-fs)".
func (s *stageRecord) liveUsers(sk StageUsage) []string {
	var out []string
	for _, p := range s.publications() {
		if p.rec.State != publishUnpublishing {
			out = append(out, fmt.Sprintf("%s (%s)", p.alloc, sk.Usage(p.mode)))
		}
	}
	return out
}

// clone returns a deep copy of r (nil for nil), as a JSON round trip
// would read it back: publications of a stage that has none are nil.
func (r *volumeRecord) clone() *volumeRecord {
	if r == nil {
		return nil
	}
	c := *r
	if r.Stages != nil {
		c.Stages = make(map[StageUsage]*stageRecord, len(r.Stages))
	}
	for k, s := range r.Stages {
		sc := *s
		sc.Writers, sc.Readers = cloneAllocs(s.Writers), cloneAllocs(s.Readers)
		c.Stages[k] = &sc
	}
	return &c
}

func cloneAllocs(m map[string]*allocRecord) map[string]*allocRecord {
	if len(m) == 0 {
		return nil
	}
	c := make(map[string]*allocRecord, len(m))
	for id, a := range m {
		ac := *a
		c[id] = &ac
	}
	return c
}

func (r *volumeRecord) sortedStages() []StageUsage {
	return slices.SortedFunc(maps.Keys(r.Stages), func(a, b StageUsage) int { return strings.Compare(a.String(), b.String()) })
}

// prune drops the stages with nothing left; nil when none is left.
func (r *volumeRecord) prune() *volumeRecord {
	if r == nil {
		return nil
	}
	for k, s := range r.Stages {
		if s.Stage == stageNone && s.users() == 0 {
			delete(r.Stages, k)
		}
	}
	if len(r.Stages) == 0 {
		return nil
	}
	return r
}

// check validates a record read from disk as the record of (namespace,
// volumeID), which a version 1 or 2 file is named after.
func (r *volumeRecord) check(namespace, volumeID string) error {
	if r.Version != formatVersion {
		return fmt.Errorf("format version %d is not the version %d this build writes", r.Version, formatVersion)
	}
	if r.Namespace != namespace || r.VolumeID != volumeID {
		return fmt.Errorf("holds volume %q in namespace %q, but its name says volume %q in namespace %q", r.VolumeID, r.Namespace, volumeID, namespace)
	}
	if err := cmp.Or(csi.ValidatePluginID(r.PluginID), csi.ValidateExternalID("external volume ID", r.ExternalID)); err != nil {
		return err
	}
	if len(r.Stages) == 0 {
		return fmt.Errorf("tracks no stage (an empty record is never written)")
	}
	for sk, s := range r.Stages {
		if err := s.check(sk); err != nil {
			return err
		}
	}
	return nil
}

func (s *stageRecord) check(sk StageUsage) error {
	switch {
	case s == nil:
		return fmt.Errorf("stage %s has no record", sk)
	case s.Stage == stageNone && s.StagingPath != "":
		return fmt.Errorf("stage %s has a staging path but no stage state", sk)
	case s.Stage == stageNone && s.users() == 0:
		return fmt.Errorf("stage %s tracks nothing", sk)
	case s.Stage != stageNone && s.Stage != stageStaging && s.Stage != stageStaged && s.Stage != stageUnstaging:
		return fmt.Errorf("stage %s has unknown stage state %q", sk, s.Stage)
	case len(s.Writers) > 0 && sk.AccessMode.ReadOnly():
		return fmt.Errorf("stage %s has writers but a read-only access mode", sk)
	}
	if s.Stage != stageNone {
		if err := checkPath(s.StagingPath); err != nil {
			return fmt.Errorf("stage %s: staging path: %w", sk, err)
		}
	}
	for _, p := range s.publications() {
		usage := sk.Usage(p.mode)
		if err := csi.ValidateAllocationID(p.alloc); err != nil {
			return fmt.Errorf("usage %s: %w", usage, err)
		}
		if p.rec == nil {
			return fmt.Errorf("usage %s: allocation %s has no record", usage, p.alloc)
		}
		if st := p.rec.State; st != publishPublishing && st != publishPublished && st != publishUnpublishing {
			return fmt.Errorf("usage %s: allocation %s has unknown publish state %q", usage, p.alloc, p.rec.State)
		}
		if err := checkPath(p.rec.TargetPath); err != nil {
			return fmt.Errorf("usage %s: allocation %s: target path: %w", usage, p.alloc, err)
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
