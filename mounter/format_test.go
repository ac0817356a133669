package mounter_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/mounter"
)

func newOn(t *testing.T, state string) (*mounter.Mounter, error) {
	t.Helper()
	m, err := mounter.New(mounter.Config{Root: filepath.Join(t.TempDir(), "mnt"), StateDir: state, Plugins: &registry{id: testPlugin}})
	if err == nil {
		t.Cleanup(func() { _ = m.Close() })
	}
	return m, err
}

// dbRecords returns by key the records that a restarted Mounter would
// load in this boot: the notes', if there are notes, else the state
// database's. It reads a copy: a live Mounter holds them locked.
func dbRecords(t testing.TB, state string) map[string]string {
	t.Helper()
	p := filepath.Join(state, "mounter.db")
	if notes, _ := filepath.Glob(filepath.Join(state, "notes-*.db")); len(notes) == 1 {
		p = notes[0]
	}
	data, err := os.ReadFile(p)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "copy.db")
	if err := os.WriteFile(cp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(cp, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("open a copy of %s: %v", p, err)
	}
	defer db.Close()
	out := map[string]string{}
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("volumes"))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			out[string(k)] = string(v)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// stateDirFiles lists the state directory but for the notes.
func stateDirFiles(t testing.TB, state string) []string {
	t.Helper()
	return slices.DeleteFunc(files(t, state), func(f string) bool { return strings.HasPrefix(f, "notes-") })
}

// putRecord writes a record into the state database, creating it; no
// Mounter may hold it.
func putRecord(t testing.TB, state, key, value string) {
	t.Helper()
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(state, "mounter.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("volumes"))
		if err != nil {
			return err
		}
		return b.Put([]byte(key), []byte(value))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// copyFixture copies testdata/<name> (state directories written by
// older versions) to a new state directory.
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	state := filepath.Join(t.TempDir(), "state")
	copyDir(t, filepath.Join("testdata", name), state)
	return state
}

// TestNew_ImportsOlderFormats: the state files of versions 1 and 2
// (plain JSON) and 3 (slot files, written by the slot store) are
// imported into the database at the first start, then removed.
func TestNew_ImportsOlderFormats(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		fixture string
		has     map[string]string // volume -> allocation that may be published
		stage   string            // the stage usage of vol1's record
	}{
		{fixture: "state-v1", has: map[string]string{"vol1": "a1"}, stage: `"snw-fs"`},
		{fixture: "state-v2", has: map[string]string{"vol1": "a1"}, stage: `"snw-fs"`},
		// vol1's newer slot holds the outcome; vol3's file is free.
		{fixture: "state-v3", has: map[string]string{"vol1": "a1", "vol2": "a2"}, stage: `"Stage":"staged"`},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			state := copyFixture(t, tc.fixture)
			m, err := newOn(t, state)
			if err != nil {
				t.Fatal(err)
			}
			for vol, alloc := range tc.has {
				if has, err := m.HasMount(ctx, "default", vol, alloc); err != nil || !has {
					t.Errorf("HasMount(%s, %s) = %v, %v, want true", vol, alloc, has, err)
				}
			}
			if has, _ := m.HasMount(ctx, "default", "vol3", "a2"); has {
				t.Error("the free file's last volume came back")
			}
			recs := dbRecords(t, state)
			if len(recs) != len(tc.has) {
				t.Errorf("database holds %v, want %d records", recs, len(tc.has))
			}
			if r := recs["default/vol1"]; !strings.Contains(r, `"Version":3`) || !strings.Contains(r, tc.stage) {
				t.Errorf("imported record %s, want version 3 with %s", r, tc.stage)
			}
			if left := stateDirFiles(t, state); len(left) != 1 || left[0] != "mounter.db" {
				t.Errorf("state directory holds %v after the import, want mounter.db alone", left)
			}
			// A restart reads the database alone.
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			m2, err := newOn(t, state)
			if err != nil {
				t.Fatal(err)
			}
			if has, err := m2.HasMount(ctx, "default", "vol1", "a1"); err != nil || !has {
				t.Errorf("after a restart HasMount = %v, %v", has, err)
			}
		})
	}
}

// TestNew_ImportLeftover: an older file of a volume the database
// already holds is what an import left behind when its removals were
// cut short: the database's record stays, and the file goes.
func TestNew_ImportLeftover(t *testing.T) {
	state := copyFixture(t, "state-v2")
	putRecord(t, state, "default/vol1", `{"Version":3,"Namespace":"default","VolumeID":"vol1","ExternalID":"ext","PluginID":"p",`+
		`"Stages":{"snw-fs":{"Stage":"staged","StagingPath":"/mnt/staging/default/vol1/snw-fs",`+
		`"Writers":{"a9":{"State":"published","TargetPath":"/mnt/per-alloc/a9/vol1/w-snw-fs"}}}}}`)
	m, err := newOn(t, state)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if has, err := m.HasMount(ctx, "default", "vol1", "a9"); err != nil || !has {
		t.Errorf("HasMount(a9) from the database = %v, %v; want true", has, err)
	}
	if has, _ := m.HasMount(ctx, "default", "vol1", "a1"); has {
		t.Error("the leftover file's record replaced the database's")
	}
	if left := stateDirFiles(t, state); len(left) != 1 {
		t.Errorf("state directory holds %v, want mounter.db alone", left)
	}
}

// TestNew_ImportRefusesCorruptSlotFile: a version 3 file with no valid
// slot stops New, and nothing is imported or removed.
func TestNew_ImportRefusesCorruptSlotFile(t *testing.T) {
	state := copyFixture(t, "state-v3")
	p := filepath.Join(state, "records", "1.state")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int{40, 4096 + 40} {
		data[off] ^= 0xff
	}
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	requireStateRefused(t, state, p, string(data), false, "no valid slot")
	if recs := dbRecords(t, state); len(recs) != 0 {
		t.Errorf("imported %v from a refused state", recs)
	}
}

// TestNew_CorruptDatabase: a database that bbolt cannot open, or a
// record in it that is not a valid record of this version, stops New
// with ErrCorruptState naming the database.
func TestNew_CorruptDatabase(t *testing.T) {
	valid := `{"Version":3,"Namespace":"default","VolumeID":"vol1","ExternalID":"ext","PluginID":"p",` +
		`"Stages":{"snw-fs":{"Stage":"staged","StagingPath":"/mnt/staging/default/vol1/snw-fs",` +
		`"Writers":{"a1":{"State":"published","TargetPath":"/mnt/per-alloc/a1/vol1/w-snw-fs"}}}}}`
	t.Run("garbage file", func(t *testing.T) {
		state := t.TempDir()
		p := filepath.Join(state, "mounter.db")
		content := strings.Repeat("not a database ", 1000)
		writeState(t, p, content)
		requireStateRefused(t, state, p, content, false, "cannot open the state database")
	})
	for _, tc := range []struct{ name, key, value, reason string }{
		{"future version", "default/vol1", strings.Replace(valid, `"Version":3`, `"Version":4`, 1), "format version 4"},
		{"not JSON", "default/vol1", `{"Version":3,`, ""},
		{"key names another volume", "default/vol2", valid, "holds volume default/vol1"},
		{"unknown field", "default/vol1", strings.Replace(valid, `"PluginID":"p"`, `"PluginID":"p","Extra":1`, 1), ""},
		{"bad target", "default/vol1", strings.Replace(valid, `"/mnt/per-alloc/a1/vol1/w-snw-fs"`, `"x"`, 1), "target path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			putRecord(t, state, tc.key, tc.value)
			p := filepath.Join(state, "mounter.db")
			data, _ := os.ReadFile(p)
			requireStateRefused(t, state, p, string(data), false, tc.reason)
		})
	}
	t.Run("valid record loads", func(t *testing.T) {
		state := t.TempDir()
		putRecord(t, state, "default/vol1", valid)
		m, err := newOn(t, state)
		if err != nil {
			t.Fatal(err)
		}
		if has, err := m.HasMount(context.Background(), "default", "vol1", "a1"); err != nil || !has {
			t.Errorf("HasMount = %v, %v", has, err)
		}
	})
}

// TestNew_Locked: a second Mounter on a state directory in use fails
// New instead of writing beside the first.
func TestNew_Locked(t *testing.T) {
	state := t.TempDir()
	if _, err := newOn(t, state); err != nil {
		t.Fatal(err)
	}
	_, err := mounter.New(mounter.Config{Root: filepath.Join(t.TempDir(), "mnt"), StateDir: state, Plugins: &registry{id: testPlugin}})
	if err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("second New = %v, want a locked state database", err)
	}
}

// TestMounter_Stats_Syncs: a whole stage-publish-unpublish-unstage
// cycle of one allocation syncs the state database twice (the mount's
// intents, the unmount's intents); its outcomes go to the notes. None
// with NoSync.
func TestMounter_Stats_Syncs(t *testing.T) {
	for _, noSync := range []bool{false, true} {
		e := newEnv(t, csi.NodeCapabilities{StageUnstageVolume: true})
		e.volume("vol1")
		m, err := mounter.New(mounter.Config{Root: e.root, StateDir: e.state, Plugins: e.reg, NoSync: noSync})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		s0 := m.Stats()
		mustMount(t, m, mountReq("vol1", "a1"))
		mustUnmount(t, m, unmountReq("vol1", "a1"))
		want := uint64(2)
		if noSync {
			want = 0
		}
		if got := m.Stats().Syncs - s0.Syncs; got != want {
			t.Errorf("NoSync %v: %d synced commits per lifecycle, want %d", noSync, got, want)
		}
	}
}
