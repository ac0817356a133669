package plugin

import (
	"errors"
	"fmt"
	"path/filepath"
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

// id checks a plugin-chosen identifier (volume, node or snapshot ID).
func (c *check) id(field, v string) {
	if c.err != nil {
		return
	}
	if err := csi.ValidateExternalID(field, v); err != nil {
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
	if c.err != nil || t == nil {
		return
	}
	for i, x := range t.Required {
		if x == nil {
			c.fail(field, "has a nil topology at Required[%d]", i)
			return
		}
	}
	for i, x := range t.Preferred {
		if x == nil {
			c.fail(field, "has a nil topology at Preferred[%d]", i)
			return
		}
	}
}

func (r *ControllerPublishRequest) validate() error {
	const m = "ControllerPublishVolume"
	if r == nil {
		return nilRequest(m)
	}
	c := check{method: m}
	c.id("ExternalID", r.ExternalID)
	c.id("ExternalNodeID", r.ExternalNodeID)
	c.capability("Capability", r.Capability, r.MountOptions)
	return c.result()
}

func (r *ControllerUnpublishRequest) validate() error {
	const m = "ControllerUnpublishVolume"
	if r == nil {
		return nilRequest(m)
	}
	c := check{method: m}
	c.id("ExternalID", r.ExternalID)
	if r.ExternalNodeID != "" {
		c.id("ExternalNodeID", r.ExternalNodeID)
	}
	return c.result()
}

func (r *ValidateCapabilitiesRequest) validate() error {
	const m = "ValidateVolumeCapabilities"
	if r == nil {
		return nilRequest(m)
	}
	c := check{method: m}
	c.id("ExternalID", r.ExternalID)
	c.capabilities(r.Capabilities, r.MountOptions)
	return c.result()
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

func (r *CreateVolumeRequest) validate() error {
	const m = "CreateVolume"
	if r == nil {
		return nilRequest(m)
	}
	c := check{method: m}
	if r.Name == "" {
		c.fail("Name", "is empty; pass a name that identifies the volume across retries")
	} else if len(r.Name) > csi.MaxIDLength {
		c.fail("Name", "is %d bytes long, the CSI limit is %d", len(r.Name), csi.MaxIDLength)
	}
	c.capacity(r.CapacityMin, r.CapacityMax, false)
	c.capabilities(r.Capabilities, r.MountOptions)
	c.source(r.Source)
	c.topology("Topology", r.Topology)
	return c.result()
}

func (r *DeleteVolumeRequest) validate() error {
	const m = "DeleteVolume"
	if r == nil {
		return nilRequest(m)
	}
	c := check{method: m}
	c.id("ExternalID", r.ExternalID)
	return c.result()
}

func (r *ListVolumesRequest) validate() error {
	if r != nil && r.MaxEntries < 0 {
		return &RequestError{Method: "ListVolumes", Field: "MaxEntries", Reason: fmt.Sprintf("is %d; pass 0 (plugin's choice) or a positive count", r.MaxEntries)}
	}
	return nil
}

func (r *ControllerExpandRequest) validate() error {
	const m = "ControllerExpandVolume"
	if r == nil {
		return nilRequest(m)
	}
	c := check{method: m}
	c.id("ExternalID", r.ExternalID)
	c.capacity(r.CapacityMin, r.CapacityMax, true)
	if r.Capability != nil {
		c.capability("Capability", *r.Capability, r.MountOptions)
	}
	return c.result()
}

func (r *CreateSnapshotRequest) validate() error {
	const m = "CreateSnapshot"
	if r == nil {
		return nilRequest(m)
	}
	c := check{method: m}
	c.id("SourceID", r.SourceID)
	if r.Name == "" {
		c.fail("Name", "is empty; pass a name that identifies the snapshot across retries")
	} else if len(r.Name) > csi.MaxIDLength {
		c.fail("Name", "is %d bytes long, the CSI limit is %d", len(r.Name), csi.MaxIDLength)
	}
	return c.result()
}

func (r *DeleteSnapshotRequest) validate() error {
	const m = "DeleteSnapshot"
	if r == nil {
		return nilRequest(m)
	}
	c := check{method: m}
	c.id("ID", r.ID)
	return c.result()
}

func (r *ListSnapshotsRequest) validate() error {
	if r != nil && r.MaxEntries < 0 {
		return &RequestError{Method: "ListSnapshots", Field: "MaxEntries", Reason: fmt.Sprintf("is %d; pass 0 (plugin's choice) or a positive count", r.MaxEntries)}
	}
	return nil
}

func (r *NodeStageRequest) validate() error {
	const m = "NodeStageVolume"
	if r == nil {
		return nilRequest(m)
	}
	c := check{method: m}
	c.id("ExternalID", r.ExternalID)
	c.path("StagingPath", r.StagingPath, true)
	c.capability("Capability", r.Capability, r.MountOptions)
	return c.result()
}

func (r *NodeUnstageRequest) validate() error {
	const m = "NodeUnstageVolume"
	if r == nil {
		return nilRequest(m)
	}
	c := check{method: m}
	c.id("ExternalID", r.ExternalID)
	c.path("StagingPath", r.StagingPath, true)
	return c.result()
}

func (r *NodePublishRequest) validate() error {
	const m = "NodePublishVolume"
	if r == nil {
		return nilRequest(m)
	}
	c := check{method: m}
	c.id("ExternalID", r.ExternalID)
	c.path("StagingPath", r.StagingPath, false)
	c.path("TargetPath", r.TargetPath, true)
	c.capability("Capability", r.Capability, r.MountOptions)
	return c.result()
}

func (r *NodeUnpublishRequest) validate() error {
	const m = "NodeUnpublishVolume"
	if r == nil {
		return nilRequest(m)
	}
	c := check{method: m}
	c.id("ExternalID", r.ExternalID)
	c.path("TargetPath", r.TargetPath, true)
	return c.result()
}

func (r *NodeExpandRequest) validate() error {
	const m = "NodeExpandVolume"
	if r == nil {
		return nilRequest(m)
	}
	c := check{method: m}
	c.id("ExternalID", r.ExternalID)
	c.path("VolumePath", r.VolumePath, true)
	c.path("StagingPath", r.StagingPath, false)
	c.capacity(r.CapacityMin, r.CapacityMax, false)
	if r.Capability != nil {
		c.capability("Capability", *r.Capability, r.MountOptions)
	}
	return c.result()
}

func (r *NodeVolumeStatsRequest) validate() error {
	const m = "NodeGetVolumeStats"
	if r == nil {
		return nilRequest(m)
	}
	c := check{method: m}
	c.id("ExternalID", r.ExternalID)
	c.path("VolumePath", r.VolumePath, true)
	c.path("StagingPath", r.StagingPath, false)
	return c.result()
}
