package mounter

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
)

// oneNode implements Plugins with one real client of a csitest plugin.
type oneNode struct{ c plugin.NodeClient }

func (n oneNode) NodePlugin(id string) (plugin.NodeClient, *csi.PluginInfo, error) {
	if id != "fake" {
		return nil, nil, fmt.Errorf("no plugin %q: %w", id, csi.ErrPluginNotFound)
	}
	return n.c, nil, nil
}

// osCrashImage copies the Mounter's state directory to a new one as an
// OS crash at this moment could leave it: every write since the last
// sync of each file of the pool lost. With syncing on, a file's stable
// slot is synced and the other slot holds only unsynced writes, so the
// image zeroes the other slot.
func osCrashImage(t *testing.T, m *Mounter, stateDir string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "state")
	err := filepath.WalkDir(stateDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(stateDir, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o700)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	s := m.store
	s.mu.Lock()
	defer s.mu.Unlock()
	known := append([]*stateFile(nil), s.free...)
	for _, v := range s.vols {
		if v.file != nil {
			known = append(known, v.file)
		}
	}
	for _, f := range known {
		if f.slotSize == 0 || f.unsure {
			continue
		}
		p := filepath.Join(dst, "records", filepath.Base(s.path(f)))
		fd, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fd.WriteAt(make([]byte, f.slotSize), int64(1-f.stable)*int64(f.slotSize)); err != nil {
			t.Fatal(err)
		}
		if err := fd.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestMounter_RefusedMount_OSCrash: a mount that the plugin refuses
// withdraws its publish intent; the host's UnmountVolume then has
// nothing to do and writes nothing, so the withdrawal itself must be
// durable: after an OS crash the allocation must not come back as a
// live user (HasMount true, and blocking other stage usages) that the
// host believes unmounted.
func TestMounter_RefusedMount_OSCrash(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		before []string // allocations mounted first
		method string   // the call the plugin refuses, for allocation "x"
		code   codes.Code
	}{
		{name: "stage refused, first mount", method: csitest.MethodNodeStageVolume, code: codes.InvalidArgument},
		{name: "stage unavailable, first mount", method: csitest.MethodNodeStageVolume, code: codes.Unavailable},
		{name: "publish refused, first mount", method: csitest.MethodNodePublishVolume, code: codes.InvalidArgument},
		{name: "publish refused beside another allocation", before: []string{"a1"}, method: csitest.MethodNodePublishVolume, code: codes.FailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode, Node: csi.NodeCapabilities{StageUnstageVolume: true}})
			p.AddVolume("ext-vol1", 1<<30, nil)
			c, err := plugin.New(plugin.Config{Endpoint: p.Endpoint(), MaxRetries: -1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			dir := t.TempDir()
			cfg := Config{Root: filepath.Join(dir, "mnt"), StateDir: filepath.Join(dir, "state"), Plugins: oneNode{c}, Logger: hclog.NewNullLogger()}
			m, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			req := func(alloc string) *MountRequest {
				return &MountRequest{Namespace: "default", VolumeID: "vol1", ExternalID: "ext-vol1", PluginID: "fake", AllocationID: alloc,
					Capability: csi.Capability{AccessMode: csi.AccessModeSingleNodeMultiWriter, AttachmentMode: csi.AttachmentModeFileSystem},
					ClaimMode:  csi.ClaimWrite}
			}
			for _, a := range tc.before {
				if _, err := m.MountVolume(ctx, req(a)); err != nil {
					t.Fatal(err)
				}
			}
			p.FailNext(tc.method, tc.code, 1)
			if _, err := m.MountVolume(ctx, req("x")); err == nil {
				t.Fatal("the mount succeeded")
			}
			// The host owes an unmount to every allocation it mounted for.
			if err := m.UnmountVolume(ctx, &UnmountRequest{Namespace: "default", VolumeID: "vol1", AllocationID: "x"}); err != nil {
				t.Fatal(err)
			}
			cfg.StateDir = osCrashImage(t, m, cfg.StateDir)
			m2, err := New(cfg)
			if err != nil {
				t.Fatalf("New after the crash: %v", err)
			}
			if has, err := m2.HasMount(ctx, "default", "vol1", "x"); err != nil || has {
				t.Errorf("HasMount(x) after an OS crash = %v, %v; the host has unmounted it", has, err)
			}
			for _, a := range tc.before {
				if has, err := m2.HasMount(ctx, "default", "vol1", a); err != nil || !has {
					t.Errorf("HasMount(%s) after an OS crash = %v, %v; want true", a, has, err)
				}
			}
			p.RequireNoViolations(t)
		})
	}
}

// TestStore_Drop_UnknownSlotSize: a file whose creation failed after
// its rename (slot size unknown) holds the volume's record at its final
// name; dropping the volume must not leave it there for the next start
// to read.
func TestStore_Drop_UnknownSlotSize(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprint("durable=", durable), func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir, true)
			if err := s.save(testRecord("a", 1)); err != nil {
				t.Fatal(err)
			}
			// As create leaves it when the directory sync fails.
			s.vols[volKey{"default", "vol1"}].file.slotSize = 0
			if err := s.drop("default", "vol1", durable); err != nil {
				t.Fatal(err)
			}
			if _, recs := reload(t, dir, true); len(recs) != 0 {
				t.Errorf("dropped volume read back: %v", recs)
			}
			// The file is free: the next save creates it again.
			if err := s.save(testRecord("b", 1)); err != nil {
				t.Fatal(err)
			}
			if got := s.path(s.vols[volKey{"default", "vol1"}].file); filepath.Base(got) != "1.state" {
				t.Errorf("the next save went to %s, want the freed 1.state", got)
			}
		})
	}
}

// TestStore_LegacyRemovalSynced: moving a version 2 file's volume to the
// pool syncs the removal of the old file, which the pool's record stops
// covering once the volume's file is freed (unsynced).
func TestStore_LegacyRemovalSynced(t *testing.T) {
	dir := t.TempDir()
	legacy := filepath.Join(dir, "volumes", "default", "vol1.json")
	rec := testRecord("a", 1)
	rec.Version = 2
	data := []byte(recordJSON(t, rec))
	if err := os.MkdirAll(filepath.Dir(legacy), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(legacy, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s, recs := reload(t, dir, true)
	if len(recs) != 1 {
		t.Fatalf("load = %v", recs)
	}
	before := s.dirSyncs.Load()
	if err := s.save(recs[volKey{"default", "vol1"}]); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(legacy); !os.IsNotExist(err) {
		t.Fatalf("version 2 file still there: %v", err)
	}
	// One for the pool file's creation, one for the removal.
	if got := s.dirSyncs.Load() - before; got != 2 {
		t.Errorf("%d directory syncs, want 2 (the new file's, and the old file's removal)", got)
	}
}
