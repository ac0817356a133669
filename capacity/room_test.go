package capacity_test

import (
	"testing"

	"github.com/csikit/csikit/capacity"
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

func TestCheck(t *testing.T) {
	i := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name            string
		rec             state.Capacity
		required, limit int64
		want            capacity.Fit
	}{
		{"Room", state.Capacity{Available: 10}, 4, 0, capacity.FitRoom},
		{"Exactly", state.Capacity{Available: 4}, 4, 0, capacity.FitRoom},
		{"NoRoom", state.Capacity{Available: 3}, 4, 0, capacity.FitNoRoom},
		{"NoSizeNeedsSomeRoom", state.Capacity{Available: 0}, 0, 0, capacity.FitNoRoom},
		{"NoSizeSomeRoom", state.Capacity{Available: 1}, 0, 0, capacity.FitRoom},
		{"AboveMax", state.Capacity{Available: 100, MaximumVolumeSize: i(8)}, 9, 0, capacity.FitTooLarge},
		{"AtMax", state.Capacity{Available: 100, MaximumVolumeSize: i(8)}, 8, 0, capacity.FitRoom},
		{"RaisedToMin", state.Capacity{Available: 5, MinimumVolumeSize: i(6)}, 1, 0, capacity.FitNoRoom},
		{"RaisedToMinFits", state.Capacity{Available: 6, MinimumVolumeSize: i(6)}, 1, 0, capacity.FitRoom},
		{"LimitBelowMin", state.Capacity{Available: 100, MinimumVolumeSize: i(6)}, 1, 5, capacity.FitTooSmall},
		{"LimitAtMin", state.Capacity{Available: 100, MinimumVolumeSize: i(6)}, 1, 6, capacity.FitRoom},
		{"MinAboveMax", state.Capacity{Available: 100, MinimumVolumeSize: i(6), MaximumVolumeSize: i(4)}, 1, 0, capacity.FitTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := capacity.Check(&tc.rec, tc.required, tc.limit); got != tc.want {
				t.Errorf("Check = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestRoom_Node(t *testing.T) {
	zone := func(z string) *csi.Topology { return &csi.Topology{Segments: map[string]string{"zone": z}} }
	recs := []state.Capacity{
		{Available: 1 << 30},                // nodes without topology
		{Topology: zone("a"), Available: 0}, // full
		{Topology: zone("b"), Available: 1 << 30, Class: state.ClassOf(map[string]string{"t": "x"})},
	}
	r := capacity.NewRoom(recs, "", 1<<20, 0)
	for _, tc := range []struct {
		topo *csi.Topology
		want capacity.Fit
	}{
		{nil, capacity.FitRoom},
		{&csi.Topology{}, capacity.FitRoom}, // empty is none
		{zone("a"), capacity.FitNoRoom},
		{zone("b"), capacity.FitUnknown}, // only another class reported
		{&csi.Topology{Segments: map[string]string{"zone": "a", "rack": "1"}}, capacity.FitUnknown},
	} {
		if got := r.Node(tc.topo); got != tc.want {
			t.Errorf("Node({%s}) = %s, want %s", tc.topo, got, tc.want)
		}
	}
	if got := r.WithRoom(); len(got) != 1 || got[0] != nil {
		t.Errorf("WithRoom = %s, want the topology-less record only", csi.TopologiesString(got))
	}
	for f, fits := range map[capacity.Fit]bool{capacity.FitUnknown: true, capacity.FitRoom: true,
		capacity.FitNoRoom: false, capacity.FitTooLarge: false, capacity.FitTooSmall: false} {
		if f.Fits() != fits {
			t.Errorf("%s.Fits() = %v", f, !fits)
		}
	}
}
