package plugin

import (
	"errors"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
)

// TestRequest_Validate_Messages pins the whole message of each request
// check, so that folding the checks together changes none of them.
func TestRequest_Validate_Messages(t *testing.T) {
	fs := csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	block := csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeBlockDevice}
	badMode := csi.Capability{AttachmentMode: csi.AttachmentModeFileSystem}
	noAttach := csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter}
	mo := &csi.MountOptions{FSType: "ext4"}
	long := strings.Repeat("n", csi.MaxIDLength+1)

	tests := []struct {
		name string
		req  interface{ validate() error }
		want string // "" for a valid request
	}{
		{"ControllerPublish nil", (*ControllerPublishRequest)(nil), "invalid ControllerPublishVolume request: request is nil; pass a request struct"},
		{"ControllerPublish valid", &ControllerPublishRequest{ExternalID: "v", ExternalNodeID: "n", Capability: fs, MountOptions: mo}, ""},
		{"ControllerPublish bad mode", &ControllerPublishRequest{ExternalID: "v", ExternalNodeID: "n", Capability: badMode},
			"invalid ControllerPublishVolume request: Capability has access mode " + csi.AccessModeUnknown.String() + ", which is not a CSI access mode; use one of csi.AccessModeSingleNodeWriter … csi.AccessModeSingleNodeMultiWriter"},
		{"ControllerPublish no attachment", &ControllerPublishRequest{ExternalID: "v", ExternalNodeID: "n", Capability: noAttach},
			"invalid ControllerPublishVolume request: Capability has attachment mode " + noAttach.AttachmentMode.String() + "; use csi.AttachmentModeFileSystem or csi.AttachmentModeBlockDevice"},
		{"ControllerPublish block with mount options", &ControllerPublishRequest{ExternalID: "v", ExternalNodeID: "n", Capability: block, MountOptions: mo},
			"invalid ControllerPublishVolume request: MountOptions are set but Capability is a block-device attachment, which takes no fs type, mount flags or mount group; pass nil MountOptions"},
		{"ControllerUnpublish any node", &ControllerUnpublishRequest{ExternalID: "v"}, ""},
		{"ControllerUnpublish nil", (*ControllerUnpublishRequest)(nil), "invalid ControllerUnpublishVolume request: request is nil; pass a request struct"},
		{"ValidateCapabilities none", &ValidateCapabilitiesRequest{ExternalID: "v"}, "invalid ValidateVolumeCapabilities request: Capabilities is empty; pass at least one capability"},
		{"ValidateCapabilities block beside mount options", &ValidateCapabilitiesRequest{ExternalID: "v", Capabilities: []csi.Capability{fs, block}, MountOptions: mo}, ""},
		{"ValidateCapabilities second bad", &ValidateCapabilitiesRequest{ExternalID: "v", Capabilities: []csi.Capability{fs, noAttach}},
			"invalid ValidateVolumeCapabilities request: Capabilities[1] has attachment mode " + noAttach.AttachmentMode.String() + "; use csi.AttachmentModeFileSystem or csi.AttachmentModeBlockDevice"},
		{"CreateVolume no name", &CreateVolumeRequest{Capabilities: []csi.Capability{fs}},
			"invalid CreateVolume request: Name is empty; pass a name that identifies the volume across retries"},
		{"CreateVolume long name", &CreateVolumeRequest{Name: long, Capabilities: []csi.Capability{fs}},
			"invalid CreateVolume request: Name is 129 bytes long, the CSI limit is 128"},
		{"CreateVolume negative min", &CreateVolumeRequest{Name: "a", CapacityMin: -1, Capabilities: []csi.Capability{fs}},
			"invalid CreateVolume request: CapacityMin is -1; pass 0 (no minimum) or a positive number of bytes"},
		{"CreateVolume negative max", &CreateVolumeRequest{Name: "a", CapacityMax: -1, Capabilities: []csi.Capability{fs}},
			"invalid CreateVolume request: CapacityMax is -1; pass 0 (no limit) or a positive number of bytes"},
		{"CreateVolume min over max", &CreateVolumeRequest{Name: "a", CapacityMin: 5, CapacityMax: 1, Capabilities: []csi.Capability{fs}},
			"invalid CreateVolume request: CapacityMin (5) exceeds CapacityMax (1)"},
		{"CreateVolume both sources", &CreateVolumeRequest{Name: "a", Capabilities: []csi.Capability{fs}, Source: &ContentSource{SnapshotID: "s", VolumeID: "v"}},
			"invalid CreateVolume request: Source names both a snapshot and a volume; pass one of them"},
		{"CreateVolume empty source", &CreateVolumeRequest{Name: "a", Capabilities: []csi.Capability{fs}, Source: &ContentSource{}},
			"invalid CreateVolume request: Source.VolumeID must not be empty"},
		{"CreateVolume nil required topology", &CreateVolumeRequest{Name: "a", Capabilities: []csi.Capability{fs}, Topology: &csi.TopologyRequest{Required: []*csi.Topology{{}, nil}}},
			"invalid CreateVolume request: Topology has a nil topology at Required[1]"},
		{"CreateVolume nil preferred topology", &CreateVolumeRequest{Name: "a", Capabilities: []csi.Capability{fs}, Topology: &csi.TopologyRequest{Preferred: []*csi.Topology{nil}}},
			"invalid CreateVolume request: Topology has a nil topology at Preferred[0]"},
		{"CreateVolume valid", &CreateVolumeRequest{Name: "a", Capabilities: []csi.Capability{fs}, Source: &ContentSource{SnapshotID: "s"}, Topology: &csi.TopologyRequest{Required: []*csi.Topology{{}}}}, ""},
		{"DeleteVolume no ID", &DeleteVolumeRequest{}, "invalid DeleteVolume request: ExternalID must not be empty"},
		{"ListVolumes nil", (*ListVolumesRequest)(nil), ""},
		{"ListVolumes negative", &ListVolumesRequest{MaxEntries: -2}, "invalid ListVolumes request: MaxEntries is -2; pass 0 (plugin's choice) or a positive count"},
		{"ControllerExpand no range", &ControllerExpandRequest{ExternalID: "v"},
			"invalid ControllerExpandVolume request: CapacityMin and CapacityMax are both 0; pass the size wanted"},
		{"ControllerExpand bad capability", &ControllerExpandRequest{ExternalID: "v", CapacityMin: 1, Capability: &block, MountOptions: mo},
			"invalid ControllerExpandVolume request: MountOptions are set but Capability is a block-device attachment, which takes no fs type, mount flags or mount group; pass nil MountOptions"},
		{"CreateSnapshot no name", &CreateSnapshotRequest{SourceID: "v"},
			"invalid CreateSnapshot request: Name is empty; pass a name that identifies the snapshot across retries"},
		{"CreateSnapshot long name", &CreateSnapshotRequest{SourceID: "v", Name: long},
			"invalid CreateSnapshot request: Name is 129 bytes long, the CSI limit is 128"},
		{"DeleteSnapshot no ID", &DeleteSnapshotRequest{}, "invalid DeleteSnapshot request: ID must not be empty"},
		{"ListSnapshots negative", &ListSnapshotsRequest{MaxEntries: -1}, "invalid ListSnapshots request: MaxEntries is -1; pass 0 (plugin's choice) or a positive count"},
		{"NodeStage no path", &NodeStageRequest{ExternalID: "v", Capability: fs}, "invalid NodeStageVolume request: StagingPath is empty; pass an absolute path"},
		{"NodeUnstage relative", &NodeUnstageRequest{ExternalID: "v", StagingPath: "rel"}, `invalid NodeUnstageVolume request: StagingPath "rel" is relative; pass an absolute path`},
		{"NodePublish dot-dot staging", &NodePublishRequest{ExternalID: "v", StagingPath: "/a/../b", TargetPath: "/t", Capability: fs},
			`invalid NodePublishVolume request: StagingPath "/a/../b" contains a ".." element; pass a clean absolute path`},
		{"NodePublish NUL target", &NodePublishRequest{ExternalID: "v", TargetPath: "/t\x00", Capability: fs},
			`invalid NodePublishVolume request: TargetPath "/t\x00" contains a NUL byte`},
		{"NodeUnpublish nil", (*NodeUnpublishRequest)(nil), "invalid NodeUnpublishVolume request: request is nil; pass a request struct"},
		{"NodeExpand relative staging", &NodeExpandRequest{ExternalID: "v", VolumePath: "/p", StagingPath: "s"},
			`invalid NodeExpandVolume request: StagingPath "s" is relative; pass an absolute path`},
		{"NodeExpand bad capability", &NodeExpandRequest{ExternalID: "v", VolumePath: "/p", Capability: &noAttach},
			"invalid NodeExpandVolume request: Capability has attachment mode " + noAttach.AttachmentMode.String() + "; use csi.AttachmentModeFileSystem or csi.AttachmentModeBlockDevice"},
		{"NodeExpand valid", &NodeExpandRequest{ExternalID: "v", VolumePath: "/p", Capability: &fs, MountOptions: mo}, ""},
		{"GetCapacity nil", (*GetCapacityRequest)(nil), ""},
		{"GetCapacity empty", &GetCapacityRequest{}, ""},
		{"GetCapacity valid", &GetCapacityRequest{Capabilities: []csi.Capability{fs, block}, MountOptions: mo, Topology: &csi.Topology{Segments: map[string]string{"zone": "a"}}}, ""},
		{"GetCapacity bad capability", &GetCapacityRequest{Capabilities: []csi.Capability{fs, noAttach}},
			"invalid GetCapacity request: Capabilities[1] has attachment mode " + noAttach.AttachmentMode.String() + "; use csi.AttachmentModeFileSystem or csi.AttachmentModeBlockDevice"},
		{"GetCapacity bad mode", &GetCapacityRequest{Capabilities: []csi.Capability{badMode}},
			"invalid GetCapacity request: Capabilities[0] has access mode " + csi.AccessModeUnknown.String() + ", which is not a CSI access mode; use one of csi.AccessModeSingleNodeWriter … csi.AccessModeSingleNodeMultiWriter"},
		{"GetCapacity empty segment key", &GetCapacityRequest{Topology: &csi.Topology{Segments: map[string]string{"": "a"}}},
			`invalid GetCapacity request: Topology has a segment with an empty key; name every segment, as in {"zone": "a"}`},
		{"ControllerGetVolume nil", (*ControllerGetVolumeRequest)(nil), "invalid ControllerGetVolume request: request is nil; pass a request struct"},
		{"ControllerGetVolume no ID", &ControllerGetVolumeRequest{}, "invalid ControllerGetVolume request: ExternalID must not be empty"},
		{"ControllerGetVolume long ID", &ControllerGetVolumeRequest{ExternalID: long}, "invalid ControllerGetVolume request: ExternalID is 129 bytes long, the limit is 128"},
		{"ControllerGetVolume valid", &ControllerGetVolumeRequest{ExternalID: "v"}, ""},
		{"NodeVolumeStats no path", &NodeVolumeStatsRequest{ExternalID: "v"}, "invalid NodeGetVolumeStats request: VolumePath is empty; pass an absolute path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.req.validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("validate() = %v\nwant %s", err, tt.want)
			}
			if !errors.Is(err, csi.ErrInvalidRequest) {
				t.Errorf("%v does not match csi.ErrInvalidRequest", err)
			}
		})
	}
}
