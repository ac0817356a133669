package plugintest_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/plugintest"
)

// Config.CreatePath, RemovePath and CheckPath are called with the roots
// and the plugin's paths; a CreatePath that fails stops the run before
// any plugin call, as a setup error; a CheckPath that still finds a path
// fails "nothing left behind".
func TestCheck_PathFuncs(t *testing.T) {
	p := csitest.Start(t, csitest.Config{Node: csi.NodeCapabilities{StageUnstageVolume: true}, Controller: csi.ControllerCapabilities{CreateDeleteVolume: true}})
	dir := t.TempDir()
	var mu sync.Mutex
	var got []string
	record := func(verb, path string) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, verb+" "+path)
	}
	cfg := plugintest.Config{Endpoint: p.Endpoint(), DataCheck: plugintest.DataWriterOnly, SkipChecks: ".",
		MountRoot: filepath.Join(dir, "mnt"), StagingDir: filepath.Join(dir, "stage"), StateDir: filepath.Join(dir, "state"),
		CreatePath: func(_ context.Context, p string) error { record("create", p); return nil },
		RemovePath: func(_ context.Context, p string) error { record("remove", p); return nil },
		CheckPath: func(_ context.Context, p string) (plugintest.PathKind, error) {
			record("check", p)
			if strings.HasPrefix(p, cfg0Staging(dir)) {
				return plugintest.PathFile, nil
			}
			return plugintest.PathNotFound, nil
		},
	}
	r := check(t, cfg)
	fs := failuresOf(r)
	if len(fs) != 1 || !strings.Contains(fs[0], "nothing left behind") || !strings.Contains(fs[0], "(file, says Config.CheckPath)") {
		t.Errorf("failures %q, want one leftover staging path", fs)
	}
	mu.Lock()
	calls := append([]string(nil), got...)
	mu.Unlock()
	want := []string{"create " + cfg.MountRoot, "create " + cfg.StagingDir}
	if len(calls) < 4 || calls[0] != want[0] || calls[1] != want[1] ||
		calls[len(calls)-2] != "remove "+cfg.StagingDir || calls[len(calls)-1] != "remove "+cfg.MountRoot {
		t.Errorf("calls %q: want the roots created first and removed last", calls)
	}

	fails := errors.New("no such container")
	cfg.CreatePath = func(context.Context, string) error { return fails }
	before := len(p.Calls())
	err := plugintest.Check(t.Context(), cfg, &plugintest.Recorder{})
	if !errors.Is(err, fails) || !strings.Contains(err.Error(), "Config.CreatePath") {
		t.Errorf("Check = %v, want the CreatePath error naming the setting", err)
	}
	if n := len(p.Calls()); n != before {
		t.Errorf("%d plugin calls after a failed CreatePath", n-before)
	}
}

func cfg0Staging(dir string) string { return filepath.Join(dir, "stage") + string(filepath.Separator) }

// Nested staging and target directories are refused before any call.
func TestCheck_NestedStagingAndTargetDirs(t *testing.T) {
	dir := t.TempDir()
	err := plugintest.Check(t.Context(), plugintest.Config{Endpoint: "/nonexistent.sock", MountRoot: dir,
		StagingDir: filepath.Join(dir, "stage"), StateDir: filepath.Join(dir, "state")}, &plugintest.Recorder{})
	if !errors.Is(err, csi.ErrInvalidRequest) || !strings.Contains(err.Error(), "Config.StagingDir") {
		t.Errorf("Check = %v, want ErrInvalidRequest naming Config.StagingDir", err)
	}
}
