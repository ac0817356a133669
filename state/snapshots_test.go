package state_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

func TestEncodeCommand_SnapshotRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, cmd := range []state.Command{
		state.RegisterSnapshot{Snapshot: csi.Snapshot{
			Namespace: "default", ID: "s1", SourceVolumeID: "db", SourceExternalID: "vol-1", ExternalID: "snap-1",
			PluginID: "ebs", Size: 1 << 30, CreatedAt: at, ReadyToUse: true,
			Parameters: map[string]string{"tier": "cold"}, Secrets: csi.Secrets{"k": "v"},
		}},
		state.DeleteSnapshot{Namespace: "default", SnapshotID: "s1"},
	} {
		b, err := state.EncodeCommand(cmd)
		if err != nil {
			t.Fatalf("EncodeCommand(%s): %v", cmd.Kind(), err)
		}
		got, err := state.DecodeCommand(b)
		if err != nil {
			t.Fatalf("DecodeCommand(%s): %v", cmd.Kind(), err)
		}
		if !reflect.DeepEqual(got, cmd) {
			t.Errorf("round trip:\n got  %#v\n want %#v", got, cmd)
		}
	}
}
