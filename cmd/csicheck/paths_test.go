package main

import (
	"path/filepath"
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
