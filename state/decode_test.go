package state_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// nestedBatch is the envelope of depth batches, each holding the next,
// around a DeleteNode, written by hand as a replica could find it in a
// log.
func nestedBatch(depth int) []byte {
	var b bytes.Buffer
	for range depth {
		b.WriteString(`{"kind":"batch","body":{"Commands":[`)
	}
	b.WriteString(`{"kind":"delete-node","body":{"NodeID":"n1"}}`)
	for range depth {
		b.WriteString(`]}}`)
	}
	return b.Bytes()
}

func TestDecodeCommand_NestedBatch(t *testing.T) {
	for _, depth := range []int{2, 3_000} {
		t.Run(fmt.Sprint(depth), func(t *testing.T) {
			cmd, err := state.DecodeCommand(nestedBatch(depth))
			if !errors.Is(err, csi.ErrInvalidRequest) || !strings.Contains(err.Error(), "batches do not nest") {
				t.Fatalf("DecodeCommand of %d nested batches = %T, %v; want ErrInvalidRequest saying batches do not nest", depth, cmd, err)
			}
		})
	}
	// One level is a batch, and fine.
	cmd, err := state.DecodeCommand(nestedBatch(1))
	if want := (state.Batch{Commands: []state.Command{state.DeleteNode{NodeID: "n1"}}}); err != nil || !reflect.DeepEqual(cmd, want) {
		t.Errorf("DecodeCommand of one batch = %#v, %v; want %#v", cmd, err, want)
	}
}

func TestEncodeCommand_NestedBatch(t *testing.T) {
	inner := state.Batch{Commands: []state.Command{state.DeleteNode{NodeID: "n1"}}}
	for _, tc := range []struct {
		name string
		cmd  state.Command
	}{
		{"Value", state.Batch{Commands: []state.Command{state.DeleteNode{NodeID: "n0"}, inner}}},
		{"Pointer", state.Batch{Commands: []state.Command{&inner}}},
		{"PointerOuter", &state.Batch{Commands: []state.Command{inner}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := state.EncodeCommand(tc.cmd)
			if !errors.Is(err, csi.ErrInvalidRequest) || !strings.Contains(err.Error(), "batches do not nest") {
				t.Errorf("EncodeCommand = %d bytes, %v; want ErrInvalidRequest saying batches do not nest", len(b), err)
			}
		})
	}
}

func TestCommand_MaxCommandSize(t *testing.T) {
	v := regVolume("default", "big", "hp", "pv-big")
	v.Parameters = map[string]string{"blob": strings.Repeat("a", state.MaxCommandSize)}
	cmd := state.RegisterVolume{Volume: v}
	if b, err := state.EncodeCommand(cmd); !errors.Is(err, csi.ErrInvalidRequest) || !strings.Contains(err.Error(), "MaxCommandSize") {
		t.Errorf("EncodeCommand of an oversized command = %d bytes, %v; want ErrInvalidRequest naming MaxCommandSize", len(b), err)
	}
	// As a replica could find it in a log written without the limit.
	body, err := json.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(map[string]any{"kind": state.KindRegisterVolume, "body": json.RawMessage(body)})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := state.DecodeCommand(raw); !errors.Is(err, csi.ErrInvalidRequest) || !strings.Contains(err.Error(), "MaxCommandSize") {
		t.Errorf("DecodeCommand of %d bytes = %T, %v; want ErrInvalidRequest naming MaxCommandSize", len(raw), got, err)
	}
}

// TestEncodeCommand_LargeBatchRoundTrip: a batch as large as a host
// writes in one go (256 checkpoints and a bulk registration of 1,000
// volumes) fits in MaxCommandSize and decodes to what was encoded.
func TestEncodeCommand_LargeBatchRoundTrip(t *testing.T) {
	var b state.Batch
	for i := range 256 {
		b.Commands = append(b.Commands, state.CheckpointClaim{Namespace: "default", VolumeID: fmt.Sprintf("vol-%06d", i),
			AllocationID: fmt.Sprintf("0f1e2d3c-4b5a-6978-8796-%012d", i), State: csi.ClaimNodeDetached})
	}
	for i := range 1_000 {
		v := regVolume("default", fmt.Sprintf("vol-%06d", i), "ebs", fmt.Sprintf("vol-0a1b2c3d%08x", i))
		v.Name = fmt.Sprintf("data-%d", i)
		v.Parameters = map[string]string{"type": "gp3", "iops": "3000"}
		v.Context = map[string]string{"fsType": "ext4"}
		v.Secrets = csi.Secrets{"token": "s3cret"}
		v.Topologies = []*csi.Topology{{Segments: map[string]string{"topology.ebs.csi.aws.com/zone": "us-east-1a"}}}
		v.Capacity = 1 << 34
		b.Commands = append(b.Commands, state.RegisterVolume{Volume: v})
	}
	enc, err := state.EncodeCommand(b)
	if err != nil {
		t.Fatalf("EncodeCommand: %v", err)
	}
	got, err := state.DecodeCommand(enc)
	if err != nil {
		t.Fatalf("DecodeCommand of %d bytes: %v", len(enc), err)
	}
	if !reflect.DeepEqual(got, b) {
		t.Errorf("the batch did not round-trip")
	}
}
