package mounter

import (
	"fmt"
	"strings"

	"github.com/csikit/csikit/csi"
)

// Usage is how allocations on this node use a volume: the claim mode and
// the (access, attachment) pair. A volume is staged once per usage and
// published once per allocation under it.
//
// Its String form is short and safe as a single path element, for
// example "w-snw-fs" (write claim, single-node-writer, file system) or
// "r-mnro-blk" (read claim, multi-node-reader-only, block device).
type Usage struct {
	ClaimMode      csi.ClaimMode
	AccessMode     csi.AccessMode
	AttachmentMode csi.AttachmentMode
}

// accessAbbrev is indexed by csi.AccessMode; entry 0 (unknown) is unused.
var accessAbbrev = [...]string{"", "snw", "snro", "mnro", "mnsw", "mnmw", "snsw", "snmw"}

// UsageOf returns the usage of a claim with the given mode and capability.
func UsageOf(mode csi.ClaimMode, c csi.Capability) Usage {
	return Usage{ClaimMode: mode, AccessMode: c.AccessMode, AttachmentMode: c.AttachmentMode}
}

// Capability returns the usage's (access, attachment) pair.
func (u Usage) Capability() csi.Capability {
	return csi.Capability{AccessMode: u.AccessMode, AttachmentMode: u.AttachmentMode}
}

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
	if err := u.Capability().Validate(); err != nil {
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
	attach := "fs"
	if u.AttachmentMode == csi.AttachmentModeBlockDevice {
		attach = "blk"
	}
	return claim + "-" + accessAbbrev[u.AccessMode] + "-" + attach
}

// ParseUsage parses the String form of a valid usage.
func ParseUsage(s string) (Usage, error) {
	parts := strings.Split(s, "-")
	bad := func(why string) (Usage, error) {
		return Usage{}, fmt.Errorf("%w: usage %q: %s; expected <r|w>-<access>-<fs|blk>, for example \"w-snw-fs\"", csi.ErrInvalidRequest, s, why)
	}
	if len(parts) != 3 {
		return bad("not three dash-separated parts")
	}
	var u Usage
	switch parts[0] {
	case "r":
		u.ClaimMode = csi.ClaimRead
	case "w":
		u.ClaimMode = csi.ClaimWrite
	default:
		return bad("claim mode is not r or w")
	}
	for i, a := range accessAbbrev {
		if i > 0 && a == parts[1] {
			u.AccessMode = csi.AccessMode(i)
		}
	}
	if u.AccessMode == csi.AccessModeUnknown {
		return bad("unknown access mode " + parts[1])
	}
	switch parts[2] {
	case "fs":
		u.AttachmentMode = csi.AttachmentModeFileSystem
	case "blk":
		u.AttachmentMode = csi.AttachmentModeBlockDevice
	default:
		return bad("attachment mode is not fs or blk")
	}
	if err := u.Validate(); err != nil {
		return Usage{}, err
	}
	return u, nil
}

// MarshalText implements encoding.TextMarshaler (the state file keys
// usages by their String form).
func (u Usage) MarshalText() ([]byte, error) {
	if err := u.Validate(); err != nil {
		return nil, err
	}
	return []byte(u.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (u *Usage) UnmarshalText(b []byte) error {
	v, err := ParseUsage(string(b))
	if err != nil {
		return err
	}
	*u = v
	return nil
}
