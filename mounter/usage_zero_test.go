package mounter_test

import (
	"encoding/json"
	"testing"

	"github.com/csikit/csikit/mounter"
)

func TestUsage_ZeroJSONRoundTrip(t *testing.T) {
	req := mounter.UnmountRequest{Namespace: "default", VolumeID: "v", AllocationID: "a"}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatalf("marshal an UnmountRequest with the zero Usage: %v", err)
	}
	var got mounter.UnmountRequest
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	if !got.Usage.IsZero() || got != req {
		t.Fatalf("round trip = %+v, want %+v", got, req)
	}
}
