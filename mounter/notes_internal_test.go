package mounter

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
)

// stagingNode starts a fake node plugin that stages, with volumes vol1
// and vol2, and returns a Config on fresh directories.
func stagingNode(t *testing.T) (Config, *csitest.Plugin) {
	t.Helper()
	p := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode, Node: csi.NodeCapabilities{StageUnstageVolume: true}})
	p.AddVolume("ext-vol1", 1<<30, nil)
	p.AddVolume("ext-vol2", 1<<30, nil)
	c, err := plugin.New(plugin.Config{Endpoint: p.Endpoint(), MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	dir := t.TempDir()
	return Config{Root: filepath.Join(dir, "mnt"), StateDir: filepath.Join(dir, "state"), Plugins: oneNode{c}, Logger: hclog.NewNullLogger()}, p
}

func openOn(t *testing.T, cfg Config, stateDir string) *Mounter {
	t.Helper()
	cfg.StateDir = stateDir
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New on %s: %v", stateDir, err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func writerReq(vol, alloc string) *MountRequest {
	return &MountRequest{Namespace: "default", VolumeID: vol, ExternalID: "ext-" + vol, PluginID: "fake", AllocationID: alloc,
		Capability: csi.Capability{AccessMode: csi.AccessModeSingleNodeMultiWriter, AttachmentMode: csi.AttachmentModeFileSystem},
		ClaimMode:  csi.ClaimWrite}
}

func doMount(t *testing.T, m *Mounter, vol, alloc string) {
	t.Helper()
	if _, err := m.MountVolume(context.Background(), writerReq(vol, alloc)); err != nil {
		t.Fatal(err)
	}
}

func doUnmount(t *testing.T, m *Mounter, vol, alloc string) {
	t.Helper()
	if err := m.UnmountVolume(context.Background(), &UnmountRequest{Namespace: "default", VolumeID: vol, AllocationID: alloc}); err != nil {
		t.Fatal(err)
	}
}

// tracked reports what a Mounter on stateDir tracks of a volume: the
// state of its stage and of each publication, "" for nothing.
func tracked(t *testing.T, cfg Config, stateDir, vol string) string {
	t.Helper()
	cfg.StateDir = stateDir
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New on %s: %v", stateDir, err)
	}
	defer m.Close()
	v := m.vols[volKey{"default", vol}]
	if v == nil || v.rec == nil {
		return ""
	}
	var out []string
	for _, sk := range v.rec.sortedStages() {
		s := v.rec.Stages[sk]
		out = append(out, string(s.Stage))
		for _, p := range s.publications() {
			out = append(out, p.alloc+":"+string(p.rec.State))
		}
	}
	return strings.Join(out, " ")
}

// The outcomes of a lifecycle go to the notes, which an agent crash
// keeps and an OS crash may lose; the state database gets them with the
// next synced commit, of any volume, and at Close.
func TestStore_NotesReachTheDatabase(t *testing.T) {
	cfg, _ := stagingNode(t)
	m := openOn(t, cfg, cfg.StateDir)
	doMount(t, m, "vol1", "a1")
	if got := tracked(t, cfg, agentCrashImage(t, cfg.StateDir), "vol1"); got != "staged a1:published" {
		t.Errorf("after an agent crash, vol1 is %q, want staged and published", got)
	}
	if got := tracked(t, cfg, osCrashImage(t, cfg.StateDir), "vol1"); got != "staging a1:publishing" {
		t.Errorf("after an OS crash, vol1 is %q, want the mount's intents", got)
	}
	doUnmount(t, m, "vol1", "a1")
	if got := tracked(t, cfg, agentCrashImage(t, cfg.StateDir), "vol1"); got != "" {
		t.Errorf("after an agent crash, the unmounted vol1 is %q", got)
	}
	if got := tracked(t, cfg, osCrashImage(t, cfg.StateDir), "vol1"); got != "unstaging a1:unpublishing" {
		t.Errorf("after an OS crash, vol1 is %q, want the unmount's intents", got)
	}
	// Another volume's intent carries vol1's removal.
	doMount(t, m, "vol2", "a2")
	if got := tracked(t, cfg, osCrashImage(t, cfg.StateDir), "vol1"); got != "" {
		t.Errorf("after vol2's mount and an OS crash, vol1 is %q", got)
	}
	doUnmount(t, m, "vol2", "a2")
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if got := tracked(t, cfg, osCrashImage(t, cfg.StateDir), "vol2"); got != "" {
		t.Errorf("after Close, the database still tracks vol2: %q", got)
	}
}

// An agent restarted in the same boot loads the notes, and the state
// database catches up with them: with a removal (vol1's, after its
// unmount) and with a newer record (vol2's, after its mount).
func TestStore_NotesAfterAgentCrash(t *testing.T) {
	cfg, p := stagingNode(t)
	m := openOn(t, cfg, cfg.StateDir)
	doMount(t, m, "vol1", "a1")
	doUnmount(t, m, "vol1", "a1")
	afterUnmount := agentCrashImage(t, cfg.StateDir)
	doMount(t, m, "vol2", "a2")
	afterMount := agentCrashImage(t, cfg.StateDir)
	for _, tc := range []struct{ image, vol, want string }{
		{afterUnmount, "vol1", ""},
		{afterMount, "vol2", "staged a2:published"},
	} {
		m2 := openOn(t, cfg, tc.image)
		if got := tracked(t, cfg, agentCrashImage(t, tc.image), tc.vol); got != tc.want {
			t.Errorf("the restarted agent has %s as %q, want %q", tc.vol, got, tc.want)
		}
		if err := m2.Close(); err != nil {
			t.Fatal(err)
		}
		if got := tracked(t, cfg, osCrashImage(t, tc.image), tc.vol); got != tc.want {
			t.Errorf("the database did not catch up with the notes: %s is %q, want %q", tc.vol, got, tc.want)
		}
	}
	p.RequireNoViolations(t)
}

// Notes of another boot are not read (a crash of the OS may have torn
// them) and are removed; nor are notes beside a database that another
// writer (an older version) committed to, nor notes that cannot be
// read: the Mounter loads the database.
func TestStore_NotesDropped(t *testing.T) {
	boot, err := os.ReadFile(bootIDFile)
	if err != nil {
		t.Skipf("no boot ID: %v", err)
	}
	thisBoot := notesPrefix + strings.TrimSpace(string(boot)) + ".db"
	for _, tc := range []struct {
		name  string
		alter func(t *testing.T, state string)
	}{
		{"another boot's", func(t *testing.T, state string) {
			if err := os.Rename(filepath.Join(state, thisBoot), filepath.Join(state, notesPrefix+"another-boot.db")); err != nil {
				t.Fatal(err)
			}
		}},
		{"another writer since", func(t *testing.T, state string) {
			db, err := bolt.Open(filepath.Join(state, dbName), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("other")); return err })
			if err = errors.Join(err, db.Close()); err != nil {
				t.Fatal(err)
			}
		}},
		{"unreadable", func(t *testing.T, state string) {
			if err := os.WriteFile(filepath.Join(state, thisBoot), []byte(strings.Repeat("torn ", 2000)), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _ := stagingNode(t)
			m := openOn(t, cfg, cfg.StateDir)
			doMount(t, m, "vol1", "a1")
			crashed := agentCrashImage(t, cfg.StateDir)
			tc.alter(t, crashed)
			if got := tracked(t, cfg, crashed, "vol1"); got != "staging a1:publishing" {
				t.Errorf("vol1 is %q, want what the database holds: the mount's intents", got)
			}
			left, _ := filepath.Glob(filepath.Join(crashed, notesPrefix+"*"))
			if len(left) != 1 || filepath.Base(left[0]) != thisBoot {
				t.Errorf("notes files %v, want %s alone", left, thisBoot)
			}
		})
	}
}
