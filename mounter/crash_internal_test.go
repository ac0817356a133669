package mounter

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
// OS crash at this moment could leave it: with what was synced, the
// state database (no write is in flight while the test copies it), and
// without the notes, which the next boot does not read.
func osCrashImage(t *testing.T, stateDir string) string { return crashImage(t, stateDir, false) }

// agentCrashImage copies the state directory as a crash of the agent
// alone leaves it: every file, whole.
func agentCrashImage(t *testing.T, stateDir string) string { return crashImage(t, stateDir, true) }

func crashImage(t *testing.T, stateDir string, notes bool) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "state")
	if err := os.MkdirAll(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != dbName && !(notes && strings.HasPrefix(e.Name(), notesPrefix)) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(stateDir, e.Name()))
		if err == nil {
			err = os.WriteFile(filepath.Join(dst, e.Name()), data, 0o600)
		}
		if err != nil {
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
			cfg.StateDir = osCrashImage(t, cfg.StateDir)
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
