package mounter

import (
	"fmt"

	"github.com/csikit/csikit/csi"
)

// Usage is how an allocation uses a volume on this node: the claim mode
// and the (access, attachment) pair. The volume is published once per
// allocation under its usage, and staged once per node under its
// StageUsage. Its String form is a safe path element, for example
// "w-snw-fs" (write claim, single-node-writer, file system).
type Usage struct {
	ClaimMode      csi.ClaimMode
	AccessMode     csi.AccessMode
	AttachmentMode csi.AttachmentMode
}

// StageUsage is how a volume is staged on this node: the (access,
// attachment) pair of its usages, without the claim mode (see "One
// stage per volume" in the package doc). Its String form is a safe path
// element, for example "snw-fs" or "mnro-blk".
type StageUsage struct {
	AccessMode     csi.AccessMode
	AttachmentMode csi.AttachmentMode
}

// accessAbbrev is indexed by csi.AccessMode; entry 0 (unknown) is unused.
var accessAbbrev = [...]string{"", "snw", "snro", "mnro", "mnsw", "mnmw", "snsw", "snmw"}

// UsageOf returns the usage of a claim.
func UsageOf(mode csi.ClaimMode, c csi.Capability) Usage {
	return Usage{ClaimMode: mode, AccessMode: c.AccessMode, AttachmentMode: c.AttachmentMode}
}

// StageUsage returns u without its claim mode.
func (u Usage) StageUsage() StageUsage {
	return StageUsage{AccessMode: u.AccessMode, AttachmentMode: u.AttachmentMode}
}

// Capability returns the usage's (access, attachment) pair.
func (u Usage) Capability() csi.Capability { return u.StageUsage().Capability() }

// ReadOnly reports whether the volume is published read-only.
func (u Usage) ReadOnly() bool { return u.ClaimMode == csi.ClaimRead }

// IsZero reports whether u is the zero Usage.
func (u Usage) IsZero() bool { return u == Usage{} }

// Validate checks that u names a defined claim mode and capability, and
// that a write claim does not use a read-only access mode.
func (u Usage) Validate() error {
	if u.ClaimMode != csi.ClaimRead && u.ClaimMode != csi.ClaimWrite {
		return fmt.Errorf("%w: claim mode %d is neither read nor write", csi.ErrInvalidRequest, int(u.ClaimMode))
	}
	if err := u.StageUsage().Validate(); err != nil {
		return err
	}
	if u.ClaimMode == csi.ClaimWrite && u.AccessMode.ReadOnly() {
		return fmt.Errorf("%w: a write claim cannot use the read-only access mode %s", csi.ErrAccessModeNotAllowed, u.AccessMode)
	}
	return nil
}

// String returns the short form, for example "w-snw-fs". An invalid
// usage prints as "invalid(…)", which ParseUsage refuses.
func (u Usage) String() string {
	if u.Validate() != nil {
		return fmt.Sprintf("invalid(%d,%d,%d)", int(u.ClaimMode), int32(u.AccessMode), int32(u.AttachmentMode))
	}
	if u.ReadOnly() {
		return "r-" + u.StageUsage().String()
	}
	return "w-" + u.StageUsage().String()
}

// ParseUsage parses the String form of a valid usage.
func ParseUsage(s string) (Usage, error) {
	for _, su := range stageUsages() {
		for _, u := range []Usage{su.Usage(csi.ClaimRead), su.Usage(csi.ClaimWrite)} {
			if u.Validate() == nil && u.String() == s {
				return u, nil
			}
		}
	}
	return Usage{}, fmt.Errorf("%w: %q is not a usage: expected <r|w>-<access>-<fs|blk>, for example \"w-snw-fs\"", csi.ErrInvalidRequest, s)
}

// MarshalText implements encoding.TextMarshaler. The zero Usage encodes
// as the empty string.
func (u Usage) MarshalText() ([]byte, error) {
	if u.IsZero() {
		return []byte{}, nil
	}
	return []byte(u.String()), u.Validate()
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (u *Usage) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*u = Usage{}
		return nil
	}
	v, err := ParseUsage(string(b))
	if err == nil {
		*u = v
	}
	return err
}

// Capability returns the stage usage's (access, attachment) pair.
func (s StageUsage) Capability() csi.Capability {
	return csi.Capability{AccessMode: s.AccessMode, AttachmentMode: s.AttachmentMode}
}

// Usage returns the usage of a claim of the given mode under s.
func (s StageUsage) Usage(mode csi.ClaimMode) Usage {
	return Usage{ClaimMode: mode, AccessMode: s.AccessMode, AttachmentMode: s.AttachmentMode}
}

// Validate checks that s names a defined capability.
func (s StageUsage) Validate() error { return s.Capability().Validate() }

// String returns the short form, for example "snw-fs". An invalid stage
// usage prints as "invalid(…)", which ParseStageUsage refuses.
func (s StageUsage) String() string {
	if s.Validate() != nil {
		return fmt.Sprintf("invalid(%d,%d)", int32(s.AccessMode), int32(s.AttachmentMode))
	}
	attach := "fs"
	if s.AttachmentMode == csi.AttachmentModeBlockDevice {
		attach = "blk"
	}
	return accessAbbrev[s.AccessMode] + "-" + attach
}

// ParseStageUsage parses the String form of a valid stage usage.
func ParseStageUsage(s string) (StageUsage, error) {
	for _, su := range stageUsages() {
		if su.String() == s {
			return su, nil
		}
	}
	return StageUsage{}, fmt.Errorf("%w: %q is not a stage usage: expected <access>-<fs|blk>, for example \"snw-fs\"", csi.ErrInvalidRequest, s)
}

// stageUsages returns every valid stage usage.
func stageUsages() []StageUsage {
	var out []StageUsage
	for am := range csi.AccessMode(len(accessAbbrev)) {
		for _, at := range []csi.AttachmentMode{csi.AttachmentModeFileSystem, csi.AttachmentModeBlockDevice} {
			if su := (StageUsage{am, at}); su.Validate() == nil {
				out = append(out, su)
			}
		}
	}
	return out
}

// MarshalText implements encoding.TextMarshaler.
func (s StageUsage) MarshalText() ([]byte, error) { return []byte(s.String()), s.Validate() }

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *StageUsage) UnmarshalText(b []byte) error {
	v, err := ParseStageUsage(string(b))
	if err == nil {
		*s = v
	}
	return err
}
