package plugin

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/csikit/csikit/csi"
)

// RequestError is a request the Client refused to send because it is
// malformed: no RPC was made. It matches csi.ErrInvalidRequest
// (errors.Is) and its class is Final. It never holds a secret.
type RequestError struct {
	// Method is the CSI method, for example "NodePublishVolume".
	Method string
	// Field is the request field at fault, for example "TargetPath".
	Field string
	// Reason says what is wrong and what to do instead.
	Reason string
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("invalid %s request: %s %s", e.Method, e.Field, e.Reason)
}

// Unwrap returns csi.ErrInvalidRequest.
func (e *RequestError) Unwrap() error { return csi.ErrInvalidRequest }

// check collects the first problem of a request; later checks are
// skipped once one failed.
type check struct {
	method string
	err    *RequestError
}

func (c *check) fail(field, format string, args ...any) {
	if c.err == nil {
		c.err = &RequestError{Method: c.method, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
}

func (c *check) result() error {
	if c.err == nil {
		return nil
	}
	return c.err
}

// nilRequest reports a nil request pointer.
func nilRequest(method string) error {
	return &RequestError{Method: method, Field: "request", Reason: "is nil; pass a request struct"}
}

// validate refuses a nil request and otherwise runs checks on it,
// returning the first problem they find.
func validate[R any](method string, r *R, checks func(c *check, r *R)) error {
	if r == nil {
		return nilRequest(method)
	}
	c := check{method: method}
	checks(&c, r)
	return c.result()
}

// id checks a plugin-chosen volume or snapshot ID.
func (c *check) id(field, v string) { c.external(field, csi.ValidateExternalID(field, v)) }

// nodeID checks a plugin-chosen CSI node ID, which may be up to 256 bytes.
func (c *check) nodeID(field, v string) { c.external(field, csi.ValidateExternalNodeID(field, v)) }

// external records the result of validating a plugin-chosen identifier.
func (c *check) external(field string, err error) {
	if c.err != nil {
		return
	}
	if err != nil {
		var ie *csi.IDError
		if errors.As(err, &ie) {
			c.fail(field, "%s", ie.Reason)
			return
		}
		c.fail(field, "is invalid: %v", err)
	}
}

// path checks a node path: absolute, without ".." elements or NUL bytes.
// An empty optional path passes.
func (c *check) path(field, p string, required bool) {
	if c.err != nil || (p == "" && !required) {
		return
	}
	switch {
	case p == "":
		c.fail(field, "is empty; pass an absolute path")
	case strings.IndexByte(p, 0) >= 0:
		c.fail(field, "%q contains a NUL byte", p)
	case !filepath.IsAbs(p):
		c.fail(field, "%q is relative; pass an absolute path", p)
	case hasDotDot(p):
		c.fail(field, "%q contains a \"..\" element; pass a clean absolute path", p)
	}
}

// hasDotDot reports whether a "/"-separated path has a ".." element.
func hasDotDot(p string) bool {
	for p != "" {
		i := strings.IndexByte(p, '/')
		if i < 0 {
			return p == ".."
		}
		if p[:i] == ".." {
			return true
		}
		p = p[i+1:]
	}
	return false
}

// capability checks an (access, attachment) pair and the mount options
// that go with it.
func (c *check) capability(field string, capab csi.Capability, mo *csi.MountOptions) {
	if c.err != nil {
		return
	}
	switch {
	case !capab.AccessMode.Valid():
		c.fail(field, "has access mode %s, which is not a CSI access mode; use one of csi.AccessModeSingleNodeWriter … csi.AccessModeSingleNodeMultiWriter", capab.AccessMode)
	case !capab.AttachmentMode.Valid():
		c.fail(field, "has attachment mode %s; use csi.AttachmentModeFileSystem or csi.AttachmentModeBlockDevice", capab.AttachmentMode)
	case capab.AttachmentMode == csi.AttachmentModeBlockDevice && hasMountOptions(mo):
		c.fail("MountOptions", "are set but %s is a block-device attachment, which takes no fs type, mount flags or mount group; pass nil MountOptions", field)
	}
}

func hasMountOptions(mo *csi.MountOptions) bool {
	return mo != nil && (mo.FSType != "" || len(mo.MountFlags) > 0 || mo.VolumeMountGroup != "")
}

// capacity checks a capacity range; required means at least one bound.
func (c *check) capacity(min, max int64, required bool) {
	switch {
	case c.err != nil:
	case min < 0:
		c.fail("CapacityMin", "is %d; pass 0 (no minimum) or a positive number of bytes", min)
	case max < 0:
		c.fail("CapacityMax", "is %d; pass 0 (no limit) or a positive number of bytes", max)
	case max > 0 && min > max:
		c.fail("CapacityMin", "(%d) exceeds CapacityMax (%d)", min, max)
	case required && min == 0 && max == 0:
		c.fail("CapacityMin", "and CapacityMax are both 0; pass the size wanted")
	}
}

func (c *check) source(s *ContentSource) {
	switch {
	case c.err != nil || s == nil:
	case s.SnapshotID != "" && s.VolumeID != "":
		c.fail("Source", "names both a snapshot and a volume; pass one of them")
	case s.SnapshotID != "":
		c.id("Source.SnapshotID", s.SnapshotID)
	default:
		c.id("Source.VolumeID", s.VolumeID)
	}
}

func (c *check) topology(field string, t *csi.TopologyRequest) {
	if t != nil {
		c.noNilTopology(field, "Required", t.Required)
		c.noNilTopology(field, "Preferred", t.Preferred)
	}
}

func (c *check) noNilTopology(field, list string, ts []*csi.Topology) {
	if c.err != nil {
		return
	}
	if i := slices.Index(ts, nil); i >= 0 {
		c.fail(field, "has a nil topology at %s[%d]", list, i)
	}
}

// name checks the name that makes a create call idempotent; what is
// "volume" or "snapshot".
func (c *check) name(name, what string) {
	switch {
	case c.err != nil:
	case name == "":
		c.fail("Name", "is empty; pass a name that identifies the %s across retries", what)
	case len(name) > csi.MaxIDLength:
		c.fail("Name", "is %d bytes long, the CSI limit is %d", len(name), csi.MaxIDLength)
	}
}

// optionalCapability checks a capability that a request may leave out.
func (c *check) optionalCapability(capab *csi.Capability, mo *csi.MountOptions) {
	if capab != nil {
		c.capability("Capability", *capab, mo)
	}
}

// maxEntries checks a list call's page size.
func maxEntries(method string, n int32) error {
	if n < 0 {
		return &RequestError{Method: method, Field: "MaxEntries", Reason: fmt.Sprintf("is %d; pass 0 (plugin's choice) or a positive count", n)}
	}
	return nil
}

func (r *ControllerPublishRequest) validate() error {
	return validate("ControllerPublishVolume", r, func(c *check, r *ControllerPublishRequest) {
		c.id("ExternalID", r.ExternalID)
		c.nodeID("ExternalNodeID", r.ExternalNodeID)
		c.capability("Capability", r.Capability, r.MountOptions)
	})
}

func (r *ControllerUnpublishRequest) validate() error {
	return validate("ControllerUnpublishVolume", r, func(c *check, r *ControllerUnpublishRequest) {
		c.id("ExternalID", r.ExternalID)
		if r.ExternalNodeID != "" {
			c.nodeID("ExternalNodeID", r.ExternalNodeID)
		}
	})
}

func (r *ValidateCapabilitiesRequest) validate() error {
	return validate("ValidateVolumeCapabilities", r, func(c *check, r *ValidateCapabilitiesRequest) {
		c.id("ExternalID", r.ExternalID)
		c.capabilities(r.Capabilities, r.MountOptions)
	})
}

func (c *check) capabilities(cs []csi.Capability, mo *csi.MountOptions) {
	if c.err != nil {
		return
	}
	if len(cs) == 0 {
		c.fail("Capabilities", "is empty; pass at least one capability")
		return
	}
	for i, x := range cs {
		// Mount options go with file-system capabilities only; they are
		// not an error beside a block capability in a list.
		c.capability(fmt.Sprintf("Capabilities[%d]", i), x, nil)
	}
}

// GetCapacityRequest may be nil: the whole capacity. Its capabilities
// are optional, but each one given must be defined.
func (r *GetCapacityRequest) validate() error {
	if r == nil {
		return nil
	}
	return validate("GetCapacity", r, func(c *check, r *GetCapacityRequest) {
		for i, x := range r.Capabilities {
			c.capability(fmt.Sprintf("Capabilities[%d]", i), x, nil)
		}
		c.segments("Topology", r.Topology)
	})
}

// segments checks a topology a request names on its own: a segment
// needs a key, or the plugin cannot tell what the value is.
func (c *check) segments(field string, t *csi.Topology) {
	if c.err != nil || t == nil {
		return
	}
	if _, ok := t.Segments[""]; ok {
		c.fail(field, "has a segment with an empty key; name every segment, as in {\"zone\": \"a\"}")
	}
}

func (r *ControllerGetVolumeRequest) validate() error {
	return validate("ControllerGetVolume", r, func(c *check, r *ControllerGetVolumeRequest) {
		c.id("ExternalID", r.ExternalID)
	})
}

func (r *CreateVolumeRequest) validate() error {
	return validate("CreateVolume", r, func(c *check, r *CreateVolumeRequest) {
		c.name(r.Name, "volume")
		c.capacity(r.CapacityMin, r.CapacityMax, false)
		c.capabilities(r.Capabilities, r.MountOptions)
		c.source(r.Source)
		c.topology("Topology", r.Topology)
	})
}

func (r *DeleteVolumeRequest) validate() error {
	return validate("DeleteVolume", r, func(c *check, r *DeleteVolumeRequest) {
		c.id("ExternalID", r.ExternalID)
	})
}

// ListVolumesRequest and ListSnapshotsRequest may be nil: list
// everything.
func (r *ListVolumesRequest) validate() error {
	if r == nil {
		return nil
	}
	return maxEntries("ListVolumes", r.MaxEntries)
}

func (r *ControllerExpandRequest) validate() error {
	return validate("ControllerExpandVolume", r, func(c *check, r *ControllerExpandRequest) {
		c.id("ExternalID", r.ExternalID)
		c.capacity(r.CapacityMin, r.CapacityMax, true)
		c.optionalCapability(r.Capability, r.MountOptions)
	})
}

func (r *CreateSnapshotRequest) validate() error {
	return validate("CreateSnapshot", r, func(c *check, r *CreateSnapshotRequest) {
		c.id("SourceID", r.SourceID)
		c.name(r.Name, "snapshot")
	})
}

func (r *DeleteSnapshotRequest) validate() error {
	return validate("DeleteSnapshot", r, func(c *check, r *DeleteSnapshotRequest) {
		c.id("ID", r.ID)
	})
}

func (r *ListSnapshotsRequest) validate() error {
	if r == nil {
		return nil
	}
	return maxEntries("ListSnapshots", r.MaxEntries)
}

func (r *NodeStageRequest) validate() error {
	return validate("NodeStageVolume", r, func(c *check, r *NodeStageRequest) {
		c.id("ExternalID", r.ExternalID)
		c.path("StagingPath", r.StagingPath, true)
		c.capability("Capability", r.Capability, r.MountOptions)
	})
}

func (r *NodeUnstageRequest) validate() error {
	return validate("NodeUnstageVolume", r, func(c *check, r *NodeUnstageRequest) {
		c.id("ExternalID", r.ExternalID)
		c.path("StagingPath", r.StagingPath, true)
	})
}

func (r *NodePublishRequest) validate() error {
	return validate("NodePublishVolume", r, func(c *check, r *NodePublishRequest) {
		c.id("ExternalID", r.ExternalID)
		c.path("StagingPath", r.StagingPath, false)
		c.path("TargetPath", r.TargetPath, true)
		c.capability("Capability", r.Capability, r.MountOptions)
	})
}

func (r *NodeUnpublishRequest) validate() error {
	return validate("NodeUnpublishVolume", r, func(c *check, r *NodeUnpublishRequest) {
		c.id("ExternalID", r.ExternalID)
		c.path("TargetPath", r.TargetPath, true)
	})
}

func (r *NodeExpandRequest) validate() error {
	return validate("NodeExpandVolume", r, func(c *check, r *NodeExpandRequest) {
		c.id("ExternalID", r.ExternalID)
		c.path("VolumePath", r.VolumePath, true)
		c.path("StagingPath", r.StagingPath, false)
		c.capacity(r.CapacityMin, r.CapacityMax, false)
		c.optionalCapability(r.Capability, r.MountOptions)
	})
}

func (r *NodeVolumeStatsRequest) validate() error {
	return validate("NodeGetVolumeStats", r, func(c *check, r *NodeVolumeStatsRequest) {
		c.id("ExternalID", r.ExternalID)
		c.path("VolumePath", r.VolumePath, true)
		c.path("StagingPath", r.StagingPath, false)
	})
}
