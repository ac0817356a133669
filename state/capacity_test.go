package state_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

func TestRegisterVolume_Capacity(t *testing.T) {
	for _, tc := range []struct {
		name          string
		capacity      int64
		min, max      int64
		wantField     string // empty: accepted
		wantMentioned string
	}{
		{name: "None"},
		{name: "All", capacity: 10 << 30, min: 1 << 30, max: 20 << 30},
		{name: "MinOnly", min: 1 << 30},
		{name: "MaxOnly", max: 1 << 30},
		{name: "MinEqualsMax", min: 1 << 30, max: 1 << 30},
		{name: "CapacityOutsideRange", capacity: 40 << 30, min: 1 << 30, max: 20 << 30}, // the plugin reports what it made
		{name: "NegativeCapacity", capacity: -1, wantField: "Capacity", wantMentioned: "-1"},
		{name: "NegativeMin", min: -5, max: 1 << 30, wantField: "RequestedCapacityMin", wantMentioned: "-5"},
		{name: "NegativeMax", max: -1 << 30, wantField: "RequestedCapacityMax", wantMentioned: "-1073741824"},
		{name: "MinAboveMax", min: 2 << 30, max: 1 << 30, wantField: "RequestedCapacityMin", wantMentioned: "RequestedCapacityMax"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRegistry(t)
			v := regVolume("default", "sized", "hp", "pv-sized")
			v.Capacity, v.RequestedCapacityMin, v.RequestedCapacityMax = tc.capacity, tc.min, tc.max
			cmd := state.RegisterVolume{Volume: v}
			if tc.wantField == "" {
				if _, err := r.apply(cmd); err != nil {
					t.Fatalf("register: %v", err)
				}
				got, err := r.s.Volume("default", "sized")
				if err != nil || got.Capacity != tc.capacity || got.RequestedCapacityMin != tc.min || got.RequestedCapacityMax != tc.max {
					t.Errorf("stored capacities %+v, %v; want %d, %d, %d", got, err, tc.capacity, tc.min, tc.max)
				}
				return
			}
			err := r.refuse(t, cmd, csi.ErrInvalidRequest)
			for _, m := range []string{"default/sized", tc.wantField, tc.wantMentioned} {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not name %q", err, m)
				}
			}
			// An update of a registered volume is checked the same way.
			r.must(state.RegisterVolume{Volume: regVolume("default", "sized", "hp", "pv-sized")})
			if _, err := r.apply(cmd); !errors.Is(err, csi.ErrInvalidRequest) {
				t.Errorf("update with the same capacities: %v, want ErrInvalidRequest", err)
			}
		})
	}
}
