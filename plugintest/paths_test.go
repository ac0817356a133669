package plugintest_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

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

// Every directory the plugin is given or looks beneath is made through
// Config.CreatePath, and removed through Config.RemovePath, the last
// made first: the roots, the probes' directory, the second node's
// roots, each staging_target_path and the parent of each target_path
// (the target itself is the plugin's to make), on both nodes.
func TestCheck_CreatePathForEveryPath(t *testing.T) {
	p := csitest.Start(t, everyCapability())
	n2 := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode, NodeID: "node-2", Node: csi.NodeCapabilities{StageUnstageVolume: true}})
	sharedBackEnd(p, n2)
	dir := t.TempDir()
	var mu sync.Mutex
	var created, removed []string
	cfg := plugintest.Config{Endpoint: p.Endpoint(), SecondNodeEndpoint: n2.Endpoint(), DataCheck: plugintest.DataWriterOnly,
		MountRoot: filepath.Join(dir, "mnt"), StagingDir: filepath.Join(dir, "stage"), StateDir: filepath.Join(dir, "state"),
		// As a command that makes the directory where the plugin looks.
		CreatePath: func(_ context.Context, p string) error {
			mu.Lock()
			defer mu.Unlock()
			created = append(created, p)
			return os.MkdirAll(p, 0o750)
		},
		RemovePath: func(_ context.Context, p string) error {
			mu.Lock()
			defer mu.Unlock()
			removed = append(removed, p)
			return nil
		},
	}
	r := check(t, cfg)
	if r.Failed() {
		t.Fatalf("failures: %v", failuresOf(r))
	}
	mu.Lock()
	defer mu.Unlock()
	var given []string
	for _, f := range []*csitest.Plugin{p, n2} {
		for _, c := range f.CallsTo(csitest.MethodNodeStageVolume) {
			given = append(given, c.Request.(*csipb.NodeStageVolumeRequest).GetStagingTargetPath())
		}
		for _, c := range f.CallsTo(csitest.MethodNodePublishVolume) {
			if tp := c.Request.(*csipb.NodePublishVolumeRequest).GetTargetPath(); tp != "" {
				given = append(given, filepath.Dir(tp))
			}
		}
	}
	probes := 0
	for _, g := range given {
		if g == "" {
			continue // a probe of the missing field
		}
		if !slices.Contains(created, g) {
			t.Errorf("the plugin was given %s, which Config.CreatePath did not make; made %q", g, created)
		}
		if strings.Contains(g, "plugintest-probe-") {
			probes++
		}
	}
	if probes == 0 {
		t.Error("no probe's target was given: the test does not cover the probes' directory")
	}
	for _, root := range []string{filepath.Join(cfg.MountRoot, "plugintest-node-2"), filepath.Join(cfg.StagingDir, "plugintest-node-2")} {
		if !slices.Contains(created, root) {
			t.Errorf("the second node's root %s was not made through Config.CreatePath; made %q", root, created)
		}
	}
	if slices.Contains(created, "") {
		t.Errorf("Config.CreatePath was asked to make an empty path: %q", created)
	}
	want := slices.Clone(created)
	slices.Reverse(want)
	if !slices.Equal(removed, want) {
		t.Errorf("removed %q, want every made path, the last made first: %q", removed, created)
	}
}

// A path with something left behind at or beneath it is not given to
// Config.RemovePath, which may delete recursively: a target the plugin
// did not unpublish keeps its parent and the mount root, and a note
// says so; every other path made is removed.
func TestCheck_RemovePathKeepsLeftovers(t *testing.T) {
	p := full(t)
	sock := startProxy(t, p.Endpoint(), answer("NodeUnpublishVolume", func(r *csipb.NodeUnpublishVolumeRequest) bool {
		return r.TargetPath != "" && r.VolumeId != ""
	}, &csipb.NodeUnpublishVolumeResponse{}, nil)())
	dir := t.TempDir()
	var mu sync.Mutex
	var created, removed []string
	cfg := plugintest.Config{Endpoint: sock, DataCheck: plugintest.DataWriterOnly, SkipChecks: ".", SkipNegative: true,
		MountRoot: filepath.Join(dir, "mnt"), StagingDir: filepath.Join(dir, "stage"), StateDir: filepath.Join(dir, "state"),
		CreatePath: func(_ context.Context, p string) error {
			mu.Lock()
			defer mu.Unlock()
			created = append(created, p)
			return nil
		},
		RemovePath: func(_ context.Context, p string) error {
			mu.Lock()
			defer mu.Unlock()
			removed = append(removed, p)
			return nil
		},
	}
	r := check(t, cfg)
	mu.Lock()
	defer mu.Unlock()
	var targets []string
	for _, c := range p.CallsTo(csitest.MethodNodePublishVolume) {
		targets = append(targets, c.Request.(*csipb.NodePublishVolumeRequest).GetTargetPath())
	}
	if len(targets) == 0 {
		t.Fatalf("nothing published; failures: %v", failuresOf(r))
	}
	for _, tp := range targets {
		for _, keep := range []string{filepath.Dir(tp), cfg.MountRoot} {
			if slices.Contains(removed, keep) {
				t.Errorf("Config.RemovePath was given %s, with the target %s left beneath it", keep, tp)
			}
		}
	}
	for _, c := range created {
		if !slices.Contains(removed, c) && !slices.ContainsFunc(targets, func(tp string) bool { return strings.HasPrefix(tp, c+string(filepath.Separator)) }) {
			t.Errorf("%s was made and not removed, with nothing left beneath it", c)
		}
	}
	if !slices.ContainsFunc(r.Notes(), func(n string) bool { return strings.Contains(n, "not given to Config.RemovePath") }) {
		t.Errorf("no note says what was kept: %q", r.Notes())
	}
}
