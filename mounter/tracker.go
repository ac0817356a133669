package mounter

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/csikit/csikit/csi"
)

// formatVersion is the version of the state file format this package
// writes and reads. A file with another version is refused (StateError),
// never guessed at.
const formatVersion = 1

// stageState is where the staging of one (volume, usage) stands. The
// empty state means the plugin does not stage (publish only).
type stageState string

const (
	stageNone stageState = ""
	// stageStaging: NodeStageVolume is being called or its outcome is
	// unknown; the volume may be staged.
	stageStaging stageState = "staging"
	// stageStaged: NodeStageVolume succeeded.
	stageStaged stageState = "staged"
	// stageUnstaging: NodeUnstageVolume is being called or failed; the
	// volume may still be staged.
	stageUnstaging stageState = "unstaging"
)

// publishState is where the publication for one allocation stands. Every
// state means "may be published": a record is dropped only once the
// plugin has confirmed the volume is not published there.
type publishState string

const (
	// publishPublishing: NodePublishVolume is being called or its outcome
	// is unknown.
	publishPublishing publishState = "publishing"
	// publishPublished: NodePublishVolume succeeded.
	publishPublished publishState = "published"
	// publishUnpublishing: NodeUnpublishVolume is being called or failed.
	publishUnpublishing publishState = "unpublishing"
)

// volumeRecord is the tracker's record of one volume on this node, and
// the content of its state file.
//
// The record on disk is always at least as pessimistic as the truth:
// every change that widens what may be staged or published (an intent)
// is written and synced before the plugin call; changes that narrow it (a
// confirmed success, a confirmed teardown, a definite failure) are kept
// in memory and reach the disk with the record's next write. A state
// read after a crash therefore never forgets a mount, and at worst makes
// the next call repeat an idempotent plugin call.
type volumeRecord struct {
	Version    int
	Namespace  string
	VolumeID   string
	ExternalID string
	PluginID   string
	Usages     map[Usage]*usageRecord
}

// usageRecord tracks the stage of one (volume, usage) and the
// allocations published under it.
type usageRecord struct {
	Stage       stageState `json:",omitempty"`
	StagingPath string     `json:",omitempty"`
	// Allocations maps an allocation ID to its publication.
	Allocations map[string]*allocRecord `json:",omitempty"`
}

type allocRecord struct {
	State      publishState
	TargetPath string
}

func (r *volumeRecord) clone() *volumeRecord {
	if r == nil {
		return nil
	}
	c := *r
	c.Usages = make(map[Usage]*usageRecord, len(r.Usages))
	for k, u := range r.Usages {
		uc := *u
		uc.Allocations = make(map[string]*allocRecord, len(u.Allocations))
		for id, a := range u.Allocations {
			ac := *a
			uc.Allocations[id] = &ac
		}
		c.Usages[k] = &uc
	}
	return &c
}

// empty reports whether the record tracks nothing that may be staged or
// published.
func (r *volumeRecord) empty() bool { return r == nil || len(r.Usages) == 0 }

// sortedUsages returns the record's usages in a stable order.
func (r *volumeRecord) sortedUsages() []Usage {
	us := slices.Collect(maps.Keys(r.Usages))
	slices.SortFunc(us, func(a, b Usage) int { return strings.Compare(a.String(), b.String()) })
	return us
}

// prune drops usages with nothing left.
func (r *volumeRecord) prune() {
	for k, u := range r.Usages {
		if u.Stage == stageNone && len(u.Allocations) == 0 {
			delete(r.Usages, k)
		}
	}
}

func sortedAllocs(u *usageRecord) []string {
	ids := slices.Collect(maps.Keys(u.Allocations))
	slices.Sort(ids)
	return ids
}

// check validates a record read from disk from the file named after
// (namespace, volumeID).
func (r *volumeRecord) check(namespace, volumeID string) error {
	if r.Version != formatVersion {
		return fmt.Errorf("format version %d is not the version %d this build reads (written by another csikit version?)", r.Version, formatVersion)
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
	if len(r.Usages) == 0 {
		return fmt.Errorf("tracks no usage (an empty record is never written)")
	}
	for usage, u := range r.Usages {
		if u == nil {
			return fmt.Errorf("usage %s has no record", usage)
		}
		switch u.Stage {
		case stageNone:
			if u.StagingPath != "" {
				return fmt.Errorf("usage %s has a staging path but no stage state", usage)
			}
			if len(u.Allocations) == 0 {
				return fmt.Errorf("usage %s tracks nothing", usage)
			}
		case stageStaging, stageStaged, stageUnstaging:
			if err := checkPath(u.StagingPath); err != nil {
				return fmt.Errorf("usage %s: staging path: %w", usage, err)
			}
		default:
			return fmt.Errorf("usage %s has unknown stage state %q", usage, u.Stage)
		}
		for id, a := range u.Allocations {
			if err := csi.ValidateAllocationID(id); err != nil {
				return fmt.Errorf("usage %s: %w", usage, err)
			}
			if a == nil {
				return fmt.Errorf("usage %s: allocation %s has no record", usage, id)
			}
			switch a.State {
			case publishPublishing, publishPublished, publishUnpublishing:
			default:
				return fmt.Errorf("usage %s: allocation %s has unknown publish state %q", usage, id, a.State)
			}
			if err := checkPath(a.TargetPath); err != nil {
				return fmt.Errorf("usage %s: allocation %s: target path: %w", usage, id, err)
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

func (u *usageRecord) clone() *usageRecord {
	if u == nil {
		return nil
	}
	c := *u
	c.Allocations = make(map[string]*allocRecord, len(u.Allocations))
	for id, a := range u.Allocations {
		ac := *a
		c.Allocations[id] = &ac
	}
	return &c
}
