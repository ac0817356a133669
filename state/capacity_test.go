package state_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

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

// TestMemStore_Restore_Capacity: snapshots written before capacity
// existed (version 1, and version 2 without capacity rows) restore with
// no records; records written since round-trip; a capacity row the
// store would not write is refused.
func TestMemStore_Restore_Capacity(t *testing.T) {
	ctx := context.Background()
	v1, err := os.ReadFile("testdata/snapshot-v1.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	old := newMemStore(t)
	if err := old.Restore(ctx, bytes.NewReader(v1)); err != nil {
		t.Fatalf("Restore v1: %v", err)
	}
	if got, err := old.Capacity("hp"); !errors.Is(err, csi.ErrPluginNotFound) || got != nil {
		t.Errorf("v1 (no plugin rows): Capacity = %v, %v; want ErrPluginNotFound", got, err)
	}

	r := newRegistry(t)
	v2 := snapshotBytes(t, r.s) // what a store before capacity wrote: no capacity rows
	if bytes.Contains(v2, []byte(`"table":"capacity"`)) {
		t.Fatalf("a store without capacity records wrote a capacity row:\n%s", v2)
	}
	s := newMemStore(t)
	if err := s.Restore(ctx, bytes.NewReader(v2)); err != nil {
		t.Fatalf("Restore v2 without capacity: %v", err)
	}
	if got, err := s.Capacity("hp"); err != nil || len(got) != 0 {
		t.Errorf("v2 without capacity: Capacity = %v, %v; want none", got, err)
	}

	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.must(state.SetCapacity{PluginID: "hp", Records: []state.Capacity{
		{Topology: &csi.Topology{Segments: map[string]string{"zone": "b"}}, Available: 1, SeenAt: at},
		{Topology: &csi.Topology{Segments: map[string]string{"zone": "a"}}, Available: 2, MaximumVolumeSize: new(int64(9)), SeenAt: at},
	}})
	want, _ := r.s.Capacity("hp")
	snap := snapshotBytes(t, r.s)
	s = newMemStore(t)
	if err := s.Restore(ctx, bytes.NewReader(snap)); err != nil {
		t.Fatalf("Restore with capacity: %v", err)
	}
	if got, err := s.Capacity("hp"); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("after restore Capacity = %+v, %v; want %+v", got, err, want)
	}
	if again := snapshotBytes(t, s); !bytes.Equal(again, snap) {
		t.Errorf("snapshot round trip differs:\n%s\nwant\n%s", again, snap)
	}

	lines := strings.Split(strings.TrimSuffix(string(snap), "\n"), "\n")
	lines = lines[:len(lines)-1]
	for name, edit := range map[string]func(string) string{
		"Unsorted": func(l string) string {
			return strings.Replace(strings.Replace(l, `"zone":"a"`, `"zone":"x"`, 1), `"zone":"b"`, `"zone":"a"`, 1)
		},
		"Empty": func(l string) string { return l[:strings.Index(l, `"Records"`)] + `"Records":null,"ModifyIndex":1}}` },
	} {
		t.Run(name, func(t *testing.T) {
			bad := slices.Clone(lines)
			for i, l := range bad {
				if strings.HasPrefix(l, `{"table":"capacity"`) {
					bad[i] = edit(l)
				}
			}
			s := newMemStore(t)
			if err := s.Restore(ctx, strings.NewReader(resealed(bad))); !errors.Is(err, state.ErrBadSnapshot) {
				t.Errorf("Restore: %v, want ErrBadSnapshot", err)
			}
		})
	}
}
