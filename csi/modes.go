package csi

import "fmt"

// AccessMode is how a volume may be used across nodes and workloads. The
// values mirror the CSI spec's VolumeCapability.AccessMode.Mode, so a
// conversion is a plain type conversion.
//
// csikit reads the spec's sentences as follows (see CheckClaim):
//
//   - SingleNodeWriter: "published once as read/write on a single node":
//     every claim on one node, at most one of them a write claim.
//   - SingleNodeReaderOnly: "published once as readonly on a single node":
//     read claims only, every claim on one node.
//   - MultiNodeReaderOnly: "published as readonly at multiple nodes": read
//     claims only, on any nodes.
//   - MultiNodeSingleWriter: "published at multiple nodes, but only one can
//     be used as read/write": any readers, at most one writer.
//   - MultiNodeMultiWriter: "published as read/write at multiple nodes":
//     anything.
//   - SingleNodeSingleWriter: "published once as read/write at a single
//     workload on a single node": exactly one claim.
//   - SingleNodeMultiWriter: "published as read/write at multiple
//     workloads on a single node": any claims, all on one node.
type AccessMode int32

// The seven access modes of CSI 1.13.
const (
	AccessModeUnknown                AccessMode = 0
	AccessModeSingleNodeWriter       AccessMode = 1
	AccessModeSingleNodeReaderOnly   AccessMode = 2
	AccessModeMultiNodeReaderOnly    AccessMode = 3
	AccessModeMultiNodeSingleWriter  AccessMode = 4
	AccessModeMultiNodeMultiWriter   AccessMode = 5
	AccessModeSingleNodeSingleWriter AccessMode = 6
	AccessModeSingleNodeMultiWriter  AccessMode = 7
)

var accessModeNames = [...]string{
	"unknown",
	"single-node-writer",
	"single-node-reader-only",
	"multi-node-reader-only",
	"multi-node-single-writer",
	"multi-node-multi-writer",
	"single-node-single-writer",
	"single-node-multi-writer",
}

func (m AccessMode) String() string {
	if m >= 0 && int(m) < len(accessModeNames) {
		return accessModeNames[m]
	}
	return fmt.Sprintf("AccessMode(%d)", int32(m))
}

// ParseAccessMode parses the String form of an access mode.
func ParseAccessMode(s string) (AccessMode, error) {
	for i, n := range accessModeNames {
		if i > 0 && n == s {
			return AccessMode(i), nil
		}
	}
	return AccessModeUnknown, fmt.Errorf("%w: unknown access mode %q", ErrInvalidRequest, s)
}

// Valid reports whether m is one of the seven defined modes.
func (m AccessMode) Valid() bool {
	return m > AccessModeUnknown && m <= AccessModeSingleNodeMultiWriter
}

// SingleNode reports whether every claim must be on one node.
func (m AccessMode) SingleNode() bool {
	switch m {
	case AccessModeSingleNodeWriter, AccessModeSingleNodeReaderOnly,
		AccessModeSingleNodeSingleWriter, AccessModeSingleNodeMultiWriter:
		return true
	}
	return false
}

// ReadOnly reports whether the mode refuses every write claim.
func (m AccessMode) ReadOnly() bool {
	return m == AccessModeSingleNodeReaderOnly || m == AccessModeMultiNodeReaderOnly
}

// MarshalText implements encoding.TextMarshaler.
func (m AccessMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (m *AccessMode) UnmarshalText(b []byte) error {
	if string(b) == "unknown" || len(b) == 0 {
		*m = AccessModeUnknown
		return nil
	}
	v, err := ParseAccessMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// AttachmentMode is how a volume is presented to a workload.
type AttachmentMode int32

// Attachment modes.
const (
	AttachmentModeUnknown AttachmentMode = 0
	// AttachmentModeFileSystem presents a mounted file system (a
	// directory).
	AttachmentModeFileSystem AttachmentMode = 1
	// AttachmentModeBlockDevice presents a raw block device (a device
	// file).
	AttachmentModeBlockDevice AttachmentMode = 2
)

func (m AttachmentMode) String() string {
	switch m {
	case AttachmentModeFileSystem:
		return "file-system"
	case AttachmentModeBlockDevice:
		return "block-device"
	case AttachmentModeUnknown:
		return "unknown"
	}
	return fmt.Sprintf("AttachmentMode(%d)", int32(m))
}

// ParseAttachmentMode parses the String form of an attachment mode.
func ParseAttachmentMode(s string) (AttachmentMode, error) {
	switch s {
	case "file-system":
		return AttachmentModeFileSystem, nil
	case "block-device":
		return AttachmentModeBlockDevice, nil
	}
	return AttachmentModeUnknown, fmt.Errorf("%w: unknown attachment mode %q", ErrInvalidRequest, s)
}

// Valid reports whether m is file-system or block-device.
func (m AttachmentMode) Valid() bool {
	return m == AttachmentModeFileSystem || m == AttachmentModeBlockDevice
}

// MarshalText implements encoding.TextMarshaler.
func (m AttachmentMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (m *AttachmentMode) UnmarshalText(b []byte) error {
	if string(b) == "unknown" || len(b) == 0 {
		*m = AttachmentModeUnknown
		return nil
	}
	v, err := ParseAttachmentMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Capability is one (access mode, attachment mode) pair a volume allows.
type Capability struct {
	AccessMode     AccessMode
	AttachmentMode AttachmentMode
}

func (c Capability) String() string { return c.AccessMode.String() + "/" + c.AttachmentMode.String() }

// Validate checks that both modes are defined.
func (c Capability) Validate() error {
	if !c.AccessMode.Valid() {
		return fmt.Errorf("%w: access mode %s is not a defined CSI access mode", ErrInvalidRequest, c.AccessMode)
	}
	if !c.AttachmentMode.Valid() {
		return fmt.Errorf("%w: attachment mode %s is not file-system or block-device", ErrInvalidRequest, c.AttachmentMode)
	}
	return nil
}

// MountOptions tune a file-system attachment.
type MountOptions struct {
	FSType     string   `json:",omitempty"`
	MountFlags []string `json:",omitempty"`
	// VolumeMountGroup is the group the CO asks the plugin to make the
	// volume writable by (CSI VOLUME_MOUNT_GROUP), or empty.
	VolumeMountGroup string `json:",omitempty"`
}

// Copy returns a deep copy; nil stays nil.
func (o *MountOptions) Copy() *MountOptions {
	if o == nil {
		return nil
	}
	c := *o
	c.MountFlags = append([]string(nil), o.MountFlags...)
	return &c
}

// Merge returns o with the fields set in override replacing its own. A
// claim's options override the volume's.
func (o *MountOptions) Merge(override *MountOptions) *MountOptions {
	out := o.Copy()
	if out == nil {
		out = &MountOptions{}
	}
	if override == nil {
		return out
	}
	if override.FSType != "" {
		out.FSType = override.FSType
	}
	if len(override.MountFlags) > 0 {
		out.MountFlags = append([]string(nil), override.MountFlags...)
	}
	if override.VolumeMountGroup != "" {
		out.VolumeMountGroup = override.VolumeMountGroup
	}
	return out
}

// ClaimMode says whether a claim reads or writes.
type ClaimMode int

// Claim modes.
const (
	ClaimRead  ClaimMode = 0
	ClaimWrite ClaimMode = 1
)

func (m ClaimMode) String() string {
	if m == ClaimWrite {
		return "write"
	}
	return "read"
}

// MarshalText implements encoding.TextMarshaler.
func (m ClaimMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (m *ClaimMode) UnmarshalText(b []byte) error {
	switch string(b) {
	case "read", "":
		*m = ClaimRead
	case "write":
		*m = ClaimWrite
	default:
		return fmt.Errorf("%w: unknown claim mode %q", ErrInvalidRequest, b)
	}
	return nil
}

// ClaimState is where a claim stands in its release. A claim is Taken
// while its allocation runs; the rest are the checkpoints of a release,
// each written before the next step starts.
type ClaimState int

// Claim states, in the order a release walks them.
const (
	// ClaimTaken: the allocation holds the claim.
	ClaimTaken ClaimState = iota
	// ClaimUnpublishing: the allocation is terminal; nothing is detached yet.
	ClaimUnpublishing
	// ClaimNodeDetached: NodeUnpublish (and NodeUnstage for the last
	// user) are done, or the node is gone.
	ClaimNodeDetached
	// ClaimControllerDetached: ControllerUnpublish is done or not needed.
	ClaimControllerDetached
	// ClaimReadyToFree: nothing remains; the claim can be removed.
	ClaimReadyToFree
)

var claimStateNames = [...]string{"taken", "unpublishing", "node-detached", "controller-detached", "ready-to-free"}

func (s ClaimState) String() string {
	if s >= 0 && int(s) < len(claimStateNames) {
		return claimStateNames[s]
	}
	return fmt.Sprintf("ClaimState(%d)", int(s))
}

// MarshalText implements encoding.TextMarshaler.
func (s ClaimState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *ClaimState) UnmarshalText(b []byte) error {
	for i, n := range claimStateNames {
		if n == string(b) {
			*s = ClaimState(i)
			return nil
		}
	}
	return fmt.Errorf("%w: unknown claim state %q", ErrInvalidRequest, b)
}

// PluginType is the role a plugin instance plays.
type PluginType string

// Plugin types.
const (
	PluginTypeController PluginType = "controller"
	PluginTypeNode       PluginType = "node"
	// PluginTypeMonolith serves both the controller and the node service
	// from one process.
	PluginTypeMonolith PluginType = "monolith"
)

// Valid reports whether t is a defined plugin type.
func (t PluginType) Valid() bool {
	return t == PluginTypeController || t == PluginTypeNode || t == PluginTypeMonolith
}

// HasController reports whether the instance serves the controller service.
func (t PluginType) HasController() bool {
	return t == PluginTypeController || t == PluginTypeMonolith
}

// HasNode reports whether the instance serves the node service.
func (t PluginType) HasNode() bool { return t == PluginTypeNode || t == PluginTypeMonolith }
