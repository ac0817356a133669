package state_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
	"github.com/hashicorp/go-hclog"
)

func TestNewMemStore_Config(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  state.Config
	}{
		{"NilLogger", state.Config{}},
		{"Logger", state.Config{Logger: hclog.NewNullLogger()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := state.NewMemStore(tc.cfg)
			if err != nil {
				t.Fatalf("NewMemStore: %v", err)
			}
			for _, tb := range state.Tables() {
				if idx, err := s.Index(tb); err != nil || idx != 0 {
					t.Errorf("Index(%s) of a new store = %d, %v", tb, idx, err)
				}
			}
			if s.LastIndex() != 0 {
				t.Errorf("LastIndex of a new store = %d", s.LastIndex())
			}
		})
	}
}

func TestMemStore_LastIndex(t *testing.T) {
	s, last := smallCluster(t)
	if got := s.LastIndex(); got != last {
		t.Errorf("LastIndex = %d, want %d", got, last)
	}
	// A repeated claim changes nothing, so the index stays.
	_, err := s.Apply(last+5, state.ClaimVolume{Namespace: "default", VolumeID: "v1", Claim: csi.Claim{
		AllocationID: "web-1", NodeID: "n1", Mode: csi.ClaimWrite,
		AccessMode: csi.AccessModeMultiNodeMultiWriter, AttachmentMode: csi.AttachmentModeFileSystem,
	}})
	if err != nil || s.LastIndex() != last {
		t.Errorf("after a repeated claim: LastIndex %d, %v; want %d", s.LastIndex(), err, last)
	}
}

// TestMemStore_Errors_NoSecrets checks that refusals name the objects
// and never carry a volume's secrets.
func TestMemStore_Errors_NoSecrets(t *testing.T) {
	s, last := smallCluster(t)
	v, err := s.Volume("default", "v1")
	if err != nil {
		t.Fatal(err)
	}
	v.ExternalID = "x2"
	_, err = s.Apply(last+1, state.RegisterVolume{Volume: *v})
	if !errors.Is(err, csi.ErrVolumeExists) {
		t.Fatalf("re-register with another external ID: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"default/v1", `"x1"`, `"x2"`, "deregister"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %s", msg, want)
		}
	}
	if v.Secrets["token"] == "" || strings.Contains(msg, v.Secrets["token"]) {
		t.Errorf("error %q leaks the volume's secret", msg)
	}
}
