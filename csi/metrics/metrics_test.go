package metrics_test

import (
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/csi/metrics/metricstest"
)

func TestReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{csi.ErrVolumeNotFound, csi.ErrVolumeNotFound.Code()},
		{&csi.RPCError{Method: "NodeStageVolume", Code: csi.CodeUnavailable}, "Unavailable"},
	} {
		if got := metrics.Reason(tc.err); got != tc.want {
			t.Errorf("Reason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestOrAndSince(t *testing.T) {
	metrics.Or(nil).IncrCounter(metrics.ClaimsTaken, 1) // drops, no panic
	rec := metricstest.New()
	if metrics.Or(rec) != rec {
		t.Fatal("Or replaced a sink")
	}
	metrics.Since(rec, metrics.ReleaseLatency, time.Now(), metrics.Label{Name: "a", Value: "b"})
	if rec.Samples("csikit.claims.release_latency;a=b") != 1 {
		t.Errorf("names %v", rec.Names())
	}
}
