package statetest

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// capacity checks SetCapacity and the Capacity read.
func (s suite) capacity(t *testing.T) {
	gp3 := state.ClassOf(map[string]string{"type": "gp3"})
	t1 := t0.Add(time.Minute)
	recs := func(at time.Time, availA int64) []state.Capacity {
		return []state.Capacity{
			{Topology: zone("b"), Class: gp3, Available: 5 << 30, MaximumVolumeSize: new(int64(1 << 30)), SeenAt: at},
			{Topology: zone("a"), Class: gp3, Available: availA, SeenAt: at},
			{Topology: zone("a"), Available: 7 << 30, MinimumVolumeSize: new(int64(1 << 20)), SeenAt: at},
		}
	}
	read := func(t *testing.T, w *world) []state.Capacity {
		t.Helper()
		got, err := w.s.Capacity(pluginEBS)
		if err != nil {
			t.Fatalf("Capacity(%s): %v", pluginEBS, err)
		}
		return got
	}

	t.Run("StoredSortedAndRead", func(t *testing.T) {
		w := s.zonal(t)
		if got := read(t, w); len(got) != 0 {
			t.Errorf("before any SetCapacity: %+v, want none", got)
		}
		before := w.index(t, state.TablePlugins)
		w.must(t, state.SetCapacity{PluginID: pluginEBS, Records: recs(t0, 10<<30)})
		if after := w.index(t, state.TablePlugins); after <= before {
			t.Errorf("TablePlugins index %d after SetCapacity, was %d: a blocking query on plugins would miss it", after, before)
		}
		got := read(t, w)
		r := recs(t0, 10<<30)
		want := []state.Capacity{r[2], r[1], r[0]} // by topology key, then class
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Capacity = %s\nwant %s", toJSON(got), toJSON(want))
		}
		// The caller owns the copy.
		*got[2].MaximumVolumeSize = 0
		got[2].Topology.Segments["zone"] = "z"
		if again := read(t, w); !reflect.DeepEqual(again, want) {
			t.Errorf("changing a returned record changed the store: %s", toJSON(again))
		}
	})

	t.Run("SameValueChangesNothing", func(t *testing.T) {
		w := s.zonal(t)
		w.must(t, state.SetCapacity{PluginID: pluginEBS, Records: recs(t0, 10<<30)})
		idx := w.index(t, state.TablePlugins)
		res := w.noop(t, state.SetCapacity{PluginID: pluginEBS, Records: recs(t1, 10<<30)})
		if res.Changed || w.index(t, state.TablePlugins) != idx {
			t.Errorf("a repeated report: Changed %v, index %d (was %d)", res.Changed, w.index(t, state.TablePlugins), idx)
		}
		for _, r := range read(t, w) {
			if !r.SeenAt.Equal(t0) {
				t.Errorf("record %s SeenAt %v, want the first report's %v", r.Key(), r.SeenAt, t0)
			}
		}
	})

	t.Run("ChangedRecordWrittenOthersKeepSeenAt", func(t *testing.T) {
		w := s.zonal(t)
		w.must(t, state.SetCapacity{PluginID: pluginEBS, Records: recs(t0, 10<<30)})
		if res := w.must(t, state.SetCapacity{PluginID: pluginEBS, Records: recs(t1, 3<<30)}); !res.Changed {
			t.Errorf("a new value: Changed false")
		}
		for _, r := range read(t, w) {
			wantAt := t0
			if r.Class == gp3 && r.Topology.Equal(zone("a")) {
				wantAt = t1
				if r.Available != 3<<30 {
					t.Errorf("zone a gp3 Available %d, want %d", r.Available, 3<<30)
				}
			}
			if !r.SeenAt.Equal(wantAt) {
				t.Errorf("record %s SeenAt %v, want %v", r.Key(), r.SeenAt, wantAt)
			}
		}
		// A record dropped is a change too.
		w.must(t, state.SetCapacity{PluginID: pluginEBS, Records: recs(t1, 3<<30)[:2]})
		if got := read(t, w); len(got) != 2 {
			t.Errorf("after dropping a record: %d records, want 2", len(got))
		}
		w.must(t, state.SetCapacity{PluginID: pluginEBS})
		if got := read(t, w); len(got) != 0 {
			t.Errorf("after an empty SetCapacity: %+v, want none", got)
		}
		w.noop(t, state.SetCapacity{PluginID: pluginEBS})
	})

	t.Run("Refused", func(t *testing.T) {
		w := s.zonal(t)
		w.must(t, state.SetCapacity{PluginID: pluginEBS, Records: recs(t0, 10<<30)})
		dup := append(recs(t0, 1), state.Capacity{Topology: zone("a"), Class: gp3, SeenAt: t0})
		w.refuse(t, state.SetCapacity{PluginID: pluginEBS, Records: dup}, csi.ErrInvalidRequest, "twice", "zone=a")
		neg := recs(t0, -1)
		w.refuse(t, state.SetCapacity{PluginID: pluginEBS, Records: neg}, csi.ErrInvalidRequest, "Available", "-1")
		negMax := recs(t0, 1)
		negMax[0].MaximumVolumeSize = new(int64(-2))
		w.refuse(t, state.SetCapacity{PluginID: pluginEBS, Records: negMax}, csi.ErrInvalidRequest, "MaximumVolumeSize")
		w.refuse(t, state.SetCapacity{PluginID: "nfs", Records: recs(t0, 1)}, csi.ErrPluginNotFound, "nfs")
		w.refuse(t, state.SetCapacity{PluginID: "bad/id"}, csi.ErrInvalidID)
		if _, err := w.s.Capacity("nfs"); !errors.Is(err, csi.ErrPluginNotFound) {
			t.Errorf("Capacity of an unknown plugin: %v, want ErrPluginNotFound", err)
		}
		if got := read(t, w); !reflect.DeepEqual(got[1], recs(t0, 10<<30)[1]) {
			t.Errorf("a refused SetCapacity changed the records: %s", toJSON(got))
		}
	})

	t.Run("GoneWithThePlugin", func(t *testing.T) {
		w := s.zonal(t)
		w.must(t, state.SetCapacity{PluginID: pluginEBS, Records: recs(t0, 10<<30)})
		for _, n := range []string{"n1", "n2", "n3", "n4"} {
			w.must(t, state.DeleteNode{NodeID: n})
		}
		if _, err := w.s.Capacity(pluginEBS); !errors.Is(err, csi.ErrPluginNotFound) {
			t.Fatalf("Capacity of the deleted plugin: %v, want ErrPluginNotFound", err)
		}
		// The plugin comes back without its old records.
		w.must(t, state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{
			fingerprint(pluginEBS, csi.PluginTypeMonolith, "n1", "ebs-ctl-1", true)}})
		if got := read(t, w); len(got) != 0 {
			t.Errorf("a plugin made again has the records of the old one: %s", toJSON(got))
		}
	})

	t.Run("Snapshot", func(t *testing.T) {
		w := s.zonal(t)
		sn := snapshotter(t, w)
		w.must(t, state.SetCapacity{PluginID: pluginEBS, Records: recs(t0, 10<<30)})
		want := read(t, w)
		r := s.zonal(t)
		if err := snapshotter(t, r).Restore(context.Background(), bytes.NewReader(snapshot(t, sn))); err != nil {
			t.Fatalf("Restore: %v", err)
		}
		if got := read(t, r); !reflect.DeepEqual(got, want) {
			t.Errorf("restored records %s\nwant %s", toJSON(got), toJSON(want))
		}
		// A restored store knows them: the same report is no change.
		r.idx = w.idx
		r.noop(t, state.SetCapacity{PluginID: pluginEBS, Records: recs(t1, 10<<30)})
	})

	t.Run("Replayed", func(t *testing.T) {
		// Through the encoded command, as a replica applies it.
		w := s.zonal(t)
		cmd := state.SetCapacity{PluginID: pluginEBS, Records: recs(t0.In(time.FixedZone("x", 3600)), 10<<30)}
		b, err := state.EncodeCommand(cmd)
		if err != nil {
			t.Fatal(err)
		}
		dec, err := state.DecodeCommand(b)
		if err != nil {
			t.Fatal(err)
		}
		w2 := s.zonal(t)
		w.must(t, cmd)
		w2.must(t, dec)
		if a, b := read(t, w), read(t, w2); !reflect.DeepEqual(a, b) {
			t.Errorf("applied as built %s\napplied decoded %s", toJSON(a), toJSON(b))
		}
	})
}
