package mounter

import (
	"fmt"
	"strings"

	"github.com/csikit/csikit/csi"
)

// Usage is how an allocation uses a volume on this node: the claim mode
// and the (access, attachment) pair. The volume is published once per
// allocation under its usage; it is staged once per node under the
// usage's StageUsage, which leaves out the claim mode.
//
// Its String form is short and safe as a single path element, for
// example "w-snw-fs" (write claim, single-node-writer, file system) or
// "r-mnro-blk" (read claim, multi-node-reader-only, block device): the
// claim mode, a dash, and the StageUsage's String form.
type Usage struct {
	ClaimMode      csi.ClaimMode
	AccessMode     csi.AccessMode
	AttachmentMode csi.AttachmentMode
}

// StageUsage is how a volume is staged on this node: the (access,
// attachment) pair of its usages, without the claim mode.
// NodeStageVolume has no read-only flag (read-only is NodePublishVolume's
// choice), so the readers and the writers of a volume on one node share
// one stage, and the CSI spec allows only one staging path per volume:
// while a volume is staged under one StageUsage, a mount under another is
// refused (csi.ErrVolumeInUse) until that stage's users have unmounted.
//
// Its String form is short and safe as a single path element, for
// example "snw-fs" or "mnro-blk".
type StageUsage struct {
	AccessMode     csi.AccessMode
	AttachmentMode csi.AttachmentMode
}

// accessAbbrev is indexed by csi.AccessMode; entry 0 (unknown) is unused.
var accessAbbrev = [...]string{"", "snw", "snro", "mnro", "mnsw", "mnmw", "snsw", "snmw"}

// UsageOf returns the usage of a claim with the given mode and capability.
func UsageOf(mode csi.ClaimMode, c csi.Capability) Usage {
	return Usage{ClaimMode: mode, AccessMode: c.AccessMode, AttachmentMode: c.AttachmentMode}
}

// StageUsage returns the stage the usage publishes from: u without its
// claim mode.
func (u Usage) StageUsage() StageUsage {
	return StageUsage{AccessMode: u.AccessMode, AttachmentMode: u.AttachmentMode}
}

// Capability returns the usage's (access, attachment) pair.
func (u Usage) Capability() csi.Capability { return u.StageUsage().Capability() }

// ReadOnly reports whether the volume is published read-only: every read
// claim is.
func (u Usage) ReadOnly() bool { return u.ClaimMode == csi.ClaimRead }

// IsZero reports whether u is the zero Usage, which an UnmountRequest
// uses to mean "whatever usage the allocation has".
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
	claim := "r"
	if u.ClaimMode == csi.ClaimWrite {
		claim = "w"
	}
	return claim + "-" + u.StageUsage().String()
}

// ParseUsage parses the String form of a valid usage.
func ParseUsage(s string) (Usage, error) {
	bad := func(why string) (Usage, error) {
		return Usage{}, fmt.Errorf("%w: usage %q: %s; expected <r|w>-<access>-<fs|blk>, for example \"w-snw-fs\"", csi.ErrInvalidRequest, s, why)
	}
	claim, rest, ok := strings.Cut(s, "-")
	if !ok || strings.Count(rest, "-") != 1 {
		return bad("not three dash-separated parts")
	}
	var u Usage
	switch claim {
	case "r":
		u.ClaimMode = csi.ClaimRead
	case "w":
		u.ClaimMode = csi.ClaimWrite
	default:
		return bad("claim mode is not r or w")
	}
	su, why := parseStageUsage(rest)
	if why != "" {
		return bad(why)
	}
	u.AccessMode, u.AttachmentMode = su.AccessMode, su.AttachmentMode
	if err := u.Validate(); err != nil {
		return Usage{}, err
	}
	return u, nil
}

// MarshalText implements encoding.TextMarshaler.
//
// The zero Usage, which an UnmountRequest reads as "whatever usage the
// allocation has", encodes as the empty string.
func (u Usage) MarshalText() ([]byte, error) {
	if u.IsZero() {
		return []byte{}, nil
	}
	if err := u.Validate(); err != nil {
		return nil, err
	}
	return []byte(u.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (u *Usage) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*u = Usage{}
		return nil
	}
	v, err := ParseUsage(string(b))
	if err != nil {
		return err
	}
	*u = v
	return nil
}

// Capability returns the stage usage's (access, attachment) pair.
func (s StageUsage) Capability() csi.Capability {
	return csi.Capability{AccessMode: s.AccessMode, AttachmentMode: s.AttachmentMode}
}

// Usage returns the usage of a claim with the given mode under s.
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
	su, why := parseStageUsage(s)
	if why != "" {
		return StageUsage{}, fmt.Errorf("%w: stage usage %q: %s; expected <access>-<fs|blk>, for example \"snw-fs\"", csi.ErrInvalidRequest, s, why)
	}
	return su, nil
}

// parseStageUsage returns the stage usage, or why s is not one.
func parseStageUsage(s string) (StageUsage, string) {
	access, attach, ok := strings.Cut(s, "-")
	if !ok || strings.Contains(attach, "-") {
		return StageUsage{}, "not two dash-separated parts"
	}
	var su StageUsage
	for i, a := range accessAbbrev {
		if i > 0 && a == access {
			su.AccessMode = csi.AccessMode(i)
		}
	}
	if su.AccessMode == csi.AccessModeUnknown {
		return StageUsage{}, "unknown access mode " + access
	}
	switch attach {
	case "fs":
		su.AttachmentMode = csi.AttachmentModeFileSystem
	case "blk":
		su.AttachmentMode = csi.AttachmentModeBlockDevice
	default:
		return StageUsage{}, "attachment mode is not fs or blk"
	}
	return su, ""
}

// MarshalText implements encoding.TextMarshaler (the state file keys
// stages by their String form).
func (s StageUsage) MarshalText() ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return []byte(s.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *StageUsage) UnmarshalText(b []byte) error {
	v, err := ParseStageUsage(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}
