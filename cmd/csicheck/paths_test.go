package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
)

// --staging-dir and --target-dir put the mounter's staging paths and
// targets beneath separate directories.
func TestRun_StagingAndTargetDirs(t *testing.T) {
	p := csitest.Start(t, csitest.Config{
		Controller: csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true},
		Node:       csi.NodeCapabilities{StageUnstageVolume: true},
	})
	d := t.TempDir()
	staging, target := filepath.Join(d, "stage"), filepath.Join(d, "pub")
	code, out, errOut := csicheck(t, append(dirs(t), "--endpoint", p.Endpoint(), "--data-check", "writer-only",
		"--staging-dir", staging, "--target-dir", target, "--skip", ".")...)
	if code != exitPass {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	under := func(p, root string) bool { return strings.HasPrefix(p, root+string(filepath.Separator)) }
	var staged, published int
	for _, c := range p.CallsTo(csitest.MethodNodeStageVolume) {
		path := c.Request.(*csipb.NodeStageVolumeRequest).GetStagingTargetPath()
		if under(path, staging) {
			staged++
		}
		if under(path, target) {
			t.Errorf("staging path %s beneath --target-dir", path)
		}
	}
	for _, c := range p.CallsTo(csitest.MethodNodePublishVolume) {
		path := c.Request.(*csipb.NodePublishVolumeRequest).GetTargetPath()
		if under(path, target) {
			published++
		}
		if under(path, staging) {
			t.Errorf("target %s beneath --staging-dir", path)
		}
	}
	if staged == 0 || published == 0 {
		t.Errorf("%d stage calls beneath --staging-dir, %d publish calls beneath --target-dir; want some of each", staged, published)
	}
}

// Nested directories are refused as a setup error naming the flags.
func TestRun_StagingDirInsideTargetDir(t *testing.T) {
	p := csitest.Start(t, csitest.Config{Node: csi.NodeCapabilities{StageUnstageVolume: true}})
	d := t.TempDir()
	code, out, errOut := csicheck(t, append(dirs(t), "--endpoint", p.Endpoint(),
		"--staging-dir", filepath.Join(d, "pub", "stage"), "--target-dir", filepath.Join(d, "pub"))...)
	if code != exitUsage {
		t.Fatalf("exit %d, want %d (setup)\n%s\n%s", code, exitUsage, out, errOut)
	}
	if !strings.Contains(errOut, "--staging-dir") || !strings.Contains(errOut, "--target-dir") {
		t.Errorf("error does not name the flags:\n%s", errOut)
	}
}

// pathScript writes an executable shell script into dir that appends
// "<verb> <path>" to log, then runs body with the path as $1.
func pathScript(t *testing.T, dir, verb, log, body string) string {
	t.Helper()
	p := filepath.Join(dir, verb+".sh")
	script := "#!/bin/sh\necho \"" + verb + " $1\" >> " + log + "\n" + body + "\n"
	if err := os.WriteFile(p, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

// The path commands are run with the path as their last argument: the
// roots are created before the run and removed after it, and every
// target and staging path the plugin was given is checked gone.
func TestRun_PathCommands(t *testing.T) {
	p := csitest.Start(t, csitest.Config{
		Controller: csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true},
		Node:       csi.NodeCapabilities{StageUnstageVolume: true},
	})
	d := t.TempDir()
	log := filepath.Join(d, "log")
	mount := filepath.Join(d, "mnt")
	create := pathScript(t, d, "create", log, `mkdir -p "$1"`)
	remove := pathScript(t, d, "remove", log, `rmdir "$1" 2>/dev/null; exit 0`)
	check := pathScript(t, d, "check", log, `if [ -d "$1" ]; then echo directory; elif [ -e "$1" ]; then echo file; else echo not_found; fi`)
	code, out, errOut := csicheck(t, "--mount-root", mount, "--state-dir", filepath.Join(d, "state"),
		"--endpoint", p.Endpoint(), "--data-check", "writer-only", "--skip", ".",
		"--create-path-cmd", create, "--remove-path-cmd", remove, "--check-path-cmd", check)
	if code != exitPass {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if lines[0] != "create "+mount {
		t.Errorf("first command %q, want the mount root created", lines[0])
	}
	if last := lines[len(lines)-1]; last != "remove "+mount {
		t.Errorf("last command %q, want the mount root removed", last)
	}
	var checked, created []string
	for _, l := range lines {
		if rest, ok := strings.CutPrefix(l, "check "); ok {
			checked = append(checked, rest)
		}
		if rest, ok := strings.CutPrefix(l, "create "); ok {
			created = append(created, rest)
		}
	}
	// Every staging path and every target's parent the plugin is given
	// is made through the command first (the target is the plugin's).
	for _, c := range append(p.CallsTo(csitest.MethodNodeStageVolume), p.CallsTo(csitest.MethodNodePublishVolume)...) {
		var dir string
		switch r := c.Request.(type) {
		case *csipb.NodeStageVolumeRequest:
			dir = r.GetStagingTargetPath()
		case *csipb.NodePublishVolumeRequest:
			if r.GetTargetPath() != "" {
				dir = filepath.Dir(r.GetTargetPath())
			}
		}
		if dir != "" && !slices.Contains(created, dir) {
			t.Errorf("%s was given %s, which --create-path-cmd did not make; made %v", c.Method, dir, created)
		}
	}
	for _, c := range append(p.CallsTo(csitest.MethodNodeStageVolume), p.CallsTo(csitest.MethodNodePublishVolume)...) {
		var path string
		switch r := c.Request.(type) {
		case *csipb.NodeStageVolumeRequest:
			path = r.GetStagingTargetPath()
		case *csipb.NodePublishVolumeRequest:
			path = r.GetTargetPath()
		}
		if strings.HasPrefix(path, filepath.Join(mount, "staging")) || strings.HasPrefix(path, filepath.Join(mount, "per-alloc")) {
			if !slices.Contains(checked, path) {
				t.Errorf("%s %s not checked; checked %v", c.Method, path, checked)
			}
		}
	}
	if len(checked) == 0 {
		t.Error("--check-path-cmd never ran")
	}
}

// A path the check command still finds fails "nothing left behind",
// naming it and the flag; a check command that prints nonsense fails
// the same step with what it printed.
func TestRun_CheckPathCommandFindsLeftover(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"directory", "echo directory", "directory, says --check-path-cmd"},
		{"nonsense", "echo maybe", `printed "maybe"`},
		{"failing", "exit 3", "exit status 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := csitest.Start(t, csitest.Config{Node: csi.NodeCapabilities{StageUnstageVolume: true}, Controller: csi.ControllerCapabilities{CreateDeleteVolume: true}})
			d := t.TempDir()
			check := pathScript(t, d, "check", filepath.Join(d, "log"), tc.body)
			code, out, errOut := csicheck(t, append(dirs(t), "--endpoint", p.Endpoint(), "--data-check", "writer-only", "--skip", ".",
				"--check-path-cmd", check)...)
			if code != exitFail {
				t.Fatalf("exit %d, want %d\n%s\n%s", code, exitFail, out, errOut)
			}
			if !strings.Contains(out, "nothing left behind") || !strings.Contains(out, tc.want) {
				t.Errorf("output does not report the leftover with %q:\n%s", tc.want, out)
			}
		})
	}
}
