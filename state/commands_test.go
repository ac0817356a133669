package state_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// everyCommand returns one populated command of each kind.
func everyCommand() []state.Command {
	at := time.Date(2026, 2, 3, 4, 5, 6, 7, time.UTC)
	fs := csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	return []state.Command{
		state.RegisterVolume{Volume: csi.Volume{
			ID: "db", Namespace: "default", Name: "db", ExternalID: "pv-1", PluginID: "ebs", Provider: "ebs.example.com",
			Capabilities: []csi.Capability{fs},
			MountOptions: &csi.MountOptions{FSType: "xfs", MountFlags: []string{"noatime"}},
			Secrets:      csi.Secrets{"token": "s3cret"},
			Parameters:   map[string]string{"type": "gp3"},
			Context:      map[string]string{"k": "v"},
			Topologies:   []*csi.Topology{{Segments: map[string]string{"zone": "a"}}},
			Capacity:     1 << 30,
		}},
		state.DeregisterVolume{Namespace: "default", VolumeID: "db", Force: true},
		state.ClaimVolume{Namespace: "default", VolumeID: "db", Claim: csi.Claim{
			AllocationID: "web-1", NodeID: "n1", ExternalNodeID: "i-1", Mode: csi.ClaimWrite,
			AccessMode: fs.AccessMode, AttachmentMode: fs.AttachmentMode,
		}},
		state.SetPublishContext{Namespace: "default", VolumeID: "db", AllocationID: "web-1", PublishContext: map[string]string{"lun": "1"}},
		state.RemoveClaim{Namespace: "default", VolumeID: "db", AllocationID: "web-1"},
		state.ReleaseClaims{AllocationID: "web-1", ReleasedAt: at},
		state.CheckpointClaim{Namespace: "default", VolumeID: "db", AllocationID: "web-1", State: csi.ClaimControllerDetached},
		state.RecordClaimError{Namespace: "default", VolumeID: "db", AllocationID: "web-1", Error: "unavailable"},
		state.FreeClaim{Namespace: "default", VolumeID: "db", AllocationID: "web-1"},
		state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{{
			PluginID: "ebs", AllocationID: "ebs-1", Type: csi.PluginTypeMonolith, Healthy: true, UpdateTime: at,
			ControllerInfo: &csi.ControllerInfo{Capabilities: csi.ControllerCapabilities{PublishUnpublishVolume: true}},
			NodeInfo:       &csi.NodeInfo{ID: "i-1", MaxVolumes: 25, AccessibleTopology: &csi.Topology{Segments: map[string]string{"zone": "a"}}},
		}}},
		state.DeleteNode{NodeID: "n1"},
		state.RegisterNode{NodeID: "n1", SecretHash: state.HashNodeSecret("s"), Address: "10.0.0.1:4647"},
		state.UpsertACLToken{Token: state.ACLToken{Name: "team-a", Hash: state.HashNodeSecret("t"), Namespaces: []string{"team-a"},
			Permissions: []csi.Permission{csi.PermVolumeRead}}, Bootstrap: true},
		state.DeleteACLToken{Name: "team-a"},
		state.UpsertAllocations{Allocations: []csi.Allocation{{
			ID: "ebs-1", Namespace: "default", NodeID: "n1", JobID: "ebs", TaskGroup: "nodes", Terminal: true,
			Plugins: []csi.AllocPlugin{{PluginID: "ebs", Type: csi.PluginTypeMonolith}},
		}}, ReleasedAt: at},
		state.DeleteAllocations{AllocationIDs: []string{"ebs-1", "web-1"}},
		state.SetCapacity{PluginID: "ebs", Records: []state.Capacity{
			{Topology: &csi.Topology{Segments: map[string]string{"zone": "a"}}, Class: state.ClassOf(map[string]string{"type": "gp3"}),
				Available: 10 << 30, MaximumVolumeSize: new(int64(4 << 30)), SeenAt: at},
			{Available: 0, MinimumVolumeSize: new(int64(1 << 20)), SeenAt: at},
		}},
		state.Batch{Commands: []state.Command{
			state.DeleteNode{NodeID: "n2"},
			state.ReleaseClaims{AllocationID: "web-2", ReleasedAt: at},
		}},
	}
}

func TestEncodeCommand_RoundTrip(t *testing.T) {
	kinds := map[state.Kind]bool{}
	for _, cmd := range everyCommand() {
		t.Run(string(cmd.Kind()), func(t *testing.T) {
			kinds[cmd.Kind()] = true
			b, err := state.EncodeCommand(cmd)
			if err != nil {
				t.Fatalf("EncodeCommand: %v", err)
			}
			var env map[string]json.RawMessage
			if err := json.Unmarshal(b, &env); err != nil || len(env) != 2 || env["body"] == nil {
				t.Fatalf("envelope %s: want {\"kind\": ..., \"body\": ...}", b)
			}
			if got := string(env["kind"]); got != `"`+string(cmd.Kind())+`"` {
				t.Errorf("kind = %s, want %q", got, cmd.Kind())
			}
			got, err := state.DecodeCommand(b)
			if err != nil {
				t.Fatalf("DecodeCommand: %v", err)
			}
			if !reflect.DeepEqual(got, cmd) {
				t.Errorf("round trip:\n got  %#v\n want %#v", got, cmd)
			}
		})
	}
	for _, k := range []state.Kind{
		state.KindRegisterVolume, state.KindDeregisterVolume, state.KindClaimVolume, state.KindSetPublishContext,
		state.KindRemoveClaim, state.KindReleaseClaims, state.KindCheckpointClaim, state.KindRecordClaimError,
		state.KindFreeClaim, state.KindUpsertNodePlugins, state.KindDeleteNode, state.KindUpsertAllocations,
		state.KindDeleteAllocations, state.KindSetCapacity, state.KindRegisterNode, state.KindBatch,
		state.KindUpsertACLToken, state.KindDeleteACLToken,
	} {
		if !kinds[k] {
			t.Errorf("kind %s has no round-trip case", k)
		}
	}
}

func TestEncodeCommand_Pointer(t *testing.T) {
	b, err := state.EncodeCommand(&state.DeleteNode{NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := state.DecodeCommand(b)
	if err != nil || got != (state.DeleteNode{NodeID: "n1"}) {
		t.Errorf("DecodeCommand = %#v, %v; want the value DeleteNode{n1}", got, err)
	}
}

func TestEncodeCommand_Nil(t *testing.T) {
	if _, err := state.EncodeCommand(nil); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Errorf("EncodeCommand(nil): %v, want ErrInvalidRequest", err)
	}
	if _, err := state.EncodeCommand(state.Batch{Commands: []state.Command{nil}}); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Errorf("EncodeCommand(batch with nil): %v, want ErrInvalidRequest", err)
	}
}

func TestDecodeCommand_Invalid(t *testing.T) {
	for _, tc := range []struct {
		name, in string
	}{
		{"NotJSON", `kind: claim`},
		{"Empty", ``},
		{"UnknownKind", `{"kind":"format-disk","body":{}}`},
		{"NoKind", `{"body":{}}`},
		{"NoBody", `{"kind":"delete-node"}`},
		{"NullBody", `{"kind":"delete-node","body":null}`},
		{"BodyOfWrongType", `{"kind":"delete-node","body":{"NodeID":7}}`},
		{"BadEnum", `{"kind":"checkpoint-claim","body":{"State":"rewound"}}`},
		{"BadBatchEntry", `{"kind":"batch","body":{"Commands":[{"kind":"nope","body":{}}]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd, err := state.DecodeCommand([]byte(tc.in))
			if !errors.Is(err, csi.ErrInvalidRequest) {
				t.Errorf("DecodeCommand(%q) = %#v, %v; want ErrInvalidRequest", tc.in, cmd, err)
			}
		})
	}
}

func TestMemStore_Apply_NilPointer(t *testing.T) {
	s := newMemStore(t)
	var nilClaim *state.ClaimVolume
	if _, err := s.Apply(1, nilClaim); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Errorf("Apply(nil *ClaimVolume): %v, want ErrInvalidRequest", err)
	}
	if _, err := s.Apply(1, state.Batch{Commands: []state.Command{nilClaim}}); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Errorf("Apply(batch of a nil pointer): %v, want ErrInvalidRequest", err)
	}
	if _, err := state.EncodeCommand(nilClaim); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Errorf("EncodeCommand(nil *ClaimVolume): %v, want ErrInvalidRequest", err)
	}
	// A non-nil pointer is applied like the value.
	res, err := s.Apply(1, &state.UpsertAllocations{Allocations: []csi.Allocation{{ID: "a", Namespace: "default", NodeID: "n1"}}})
	if err != nil || !res.Changed {
		t.Errorf("Apply(&UpsertAllocations) = %+v, %v", res, err)
	}
}
