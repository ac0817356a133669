package hostpath

import (
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// capRecord is a file-system volume capability as stored in the state
// files. Block capabilities are never stored: the plugin refuses them.
type capRecord struct {
	AccessMode string   `json:"access_mode"` // csipb enum name, e.g. SINGLE_NODE_WRITER
	FSType     string   `json:"fs_type,omitempty"`
	MountFlags []string `json:"mount_flags,omitempty"`
	MountGroup string   `json:"volume_mount_group,omitempty"`
}

func (c capRecord) equal(o capRecord) bool {
	return c.AccessMode == o.AccessMode && c.FSType == o.FSType && c.MountGroup == o.MountGroup &&
		slices.Equal(c.MountFlags, o.MountFlags)
}

func (c capRecord) mode() csipb.VolumeCapability_AccessMode_Mode {
	return csipb.VolumeCapability_AccessMode_Mode(csipb.VolumeCapability_AccessMode_Mode_value[c.AccessMode])
}

// singleNode reports whether the access mode confines the volume to one
// node at a time.
func (c capRecord) singleNode() bool {
	switch c.mode() {
	case csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		return true
	}
	return false
}

// readerOnly reports whether the access mode allows no writer at all.
func (c capRecord) readerOnly() bool {
	m := c.mode()
	return m == csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY ||
		m == csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
}

// checkCapability validates one capability of a request and converts it.
// field names the request field in the error message. Every failure is
// InvalidArgument: a missing access mode or access type is a missing
// required field, and block access is a value this plugin does not
// support (it serves directories, which only a file-system attachment
// can carry).
func checkCapability(field string, c *csipb.VolumeCapability) (capRecord, error) {
	if c == nil {
		return capRecord{}, status.Errorf(codes.InvalidArgument, "%s is required", field)
	}
	m := c.GetAccessMode().GetMode()
	if m == csipb.VolumeCapability_AccessMode_UNKNOWN {
		return capRecord{}, status.Errorf(codes.InvalidArgument, "%s: access_mode is required", field)
	}
	if _, ok := csipb.VolumeCapability_AccessMode_Mode_name[int32(m)]; !ok {
		return capRecord{}, status.Errorf(codes.InvalidArgument, "%s: access mode %d is not defined by CSI v1.13", field, m)
	}
	switch t := c.GetAccessType().(type) {
	case *csipb.VolumeCapability_Block:
		return capRecord{}, status.Errorf(codes.InvalidArgument,
			"%s: block access is not supported: the hostpath plugin serves directories, use a mount (file-system) capability", field)
	case *csipb.VolumeCapability_Mount:
		mv := t.Mount
		return capRecord{
			AccessMode: m.String(),
			FSType:     mv.GetFsType(),
			MountFlags: slices.Clone(mv.GetMountFlags()),
			MountGroup: mv.GetVolumeMountGroup(),
		}, nil
	default:
		return capRecord{}, status.Errorf(codes.InvalidArgument, "%s: access_type (mount) is required", field)
	}
}

// checkCapabilities validates a non-empty list of capabilities.
func checkCapabilities(field string, cs []*csipb.VolumeCapability) ([]capRecord, error) {
	if len(cs) == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "%s is required: give at least one volume capability", field)
	}
	out := make([]capRecord, 0, len(cs))
	for _, c := range cs {
		r, err := checkCapability(field, c)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}
