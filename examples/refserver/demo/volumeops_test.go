package demo_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/demo"
)

// opsLifecycle is the order of the volume operations demo's lines.
var opsLifecycle = []string{
	"[demo] volume ops-vol created with 67108864 bytes",
	"[node-2] NodeStageVolume ok: vol-",
	"[node-2] NodePublishVolume ok: vol-",
	"[demo] writer-1 holds a write claim on ops-vol, mounted on node-2",
	"[demo] writer-1 wrote hello.txt through the mount",
	"[server] snapshot default/ops-snap of volume ops-vol created by plugin hostpath",
	"[demo] snapshot ops-snap of ops-vol is ready to use",
	"[node-1] ControllerExpandVolume ok: vol-",
	"[node-2] NodeExpandVolume ok: vol-",
	"[demo] volume ops-vol expanded online to 134217728 bytes; node step done on node-2",
	"[demo] writer-1 reads hello.txt through the mount after the expansion: the data is kept",
	"[node-2] NodeUnstageVolume ok: vol-",
	"[demo] writer-1 stopped; its claim is freed and its mounts are gone",
	"[demo] snapshot ops-snap restored into volume ops-restored",
	"[node-1] NodePublishVolume ok: vol-",
	"[demo] reader-1 reads hello.txt back through the mount of the restored volume",
	"[demo] reader-1 stopped; its claim is freed and its mounts are gone",
	"[demo] done: created, written, snapshotted, expanded online, restored and read back",
	"[demo] stopped cleanly",
}

// checkOps asserts what every volume operations demo run shows.
func checkOps(t *testing.T, out string, res *demo.OpsResult) {
	t.Helper()
	requireInOrder(t, out, opsLifecycle...)
	if strings.Contains(out, "demo-secret") {
		t.Errorf("the volume's secret was printed:\n%s", out)
	}
	if strings.Contains(out, " failed") {
		t.Errorf("a step failed:\n%s", out)
	}
	if res.Capacity < demo.OpsExpandedBytes {
		t.Errorf("capacity %d after the expansion, want at least %d", res.Capacity, demo.OpsExpandedBytes)
	}
	if res.Snapshot == nil || !res.Snapshot.ReadyToUse || res.Snapshot.SourceVolumeID != demo.OpsVolumeID {
		t.Errorf("snapshot %+v, want a ready snapshot of %s", res.Snapshot, demo.OpsVolumeID)
	}
	if res.ReadAfterExpand != demo.FileContent || res.ReadRestored != demo.FileContent {
		t.Errorf("read %q after the expansion and %q from the restored volume, want %q",
			res.ReadAfterExpand, res.ReadRestored, demo.FileContent)
	}
	if !strings.Contains(res.ReaderMount, filepath.Join("node-1", "mnt")) || !strings.Contains(res.WriterMount, filepath.Join("node-2", "mnt")) {
		t.Errorf("mounts %q (writer) and %q (reader) are not under node-2's and node-1's mount roots", res.WriterMount, res.ReaderMount)
	}
	if len(res.MountsAfter) != 0 {
		t.Errorf("mounts left after the releases: %v", res.MountsAfter)
	}
}

// TestRunVolumeOps_BindMounts runs the volume operations demo with real
// bind mounts, as root: the restored volume is a bind mount while it is
// read, and /proc/self/mountinfo shows nothing under the demo's
// directory at the end, which is removed.
func TestRunVolumeOps_BindMounts(t *testing.T) {
	if err := hostpath.CanBindMount(); err != nil {
		t.Skipf("bind mounts need root here (%v); TestRunVolumeOps_Symlink covers the rest", err)
	}
	var out syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := demo.RunVolumeOps(ctx, demo.Config{Out: &out, Mount: hostpath.MountBind})
	if err != nil {
		t.Fatalf("demo: %v\noutput:\n%s", err, out.String())
	}
	checkOps(t, out.String(), res)
	if res.MountMethod != hostpath.MountBind {
		t.Errorf("mount method %q, want bind", res.MountMethod)
	}
	var target bool
	for _, m := range res.MountsWhileRestored {
		target = target || m == res.ReaderMount
	}
	if len(res.MountsWhileRestored) != 2 || !target {
		t.Errorf("mounts while the restored volume was mounted: %v; want its staging path and the target %s", res.MountsWhileRestored, res.ReaderMount)
	}
	if _, err := os.Stat(res.Dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the demo's temporary directory %s was not removed: %v", res.Dir, err)
	}
	if left, err := demo.MountsUnder(filepath.Dir(res.Dir)); err != nil || containsUnder(left, res.Dir) {
		t.Errorf("mounts left under %s: %v (%v)", res.Dir, left, err)
	}
}

// TestRunVolumeOps_Symlink runs the volume operations demo with the
// symlink mount method, which works for any user.
func TestRunVolumeOps_Symlink(t *testing.T) {
	dir := shortTempDir(t)
	var out syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := demo.RunVolumeOps(ctx, demo.Config{DataDir: dir, Out: &out, Mount: hostpath.MountSymlink})
	if err != nil {
		t.Fatalf("demo: %v\noutput:\n%s", err, out.String())
	}
	checkOps(t, out.String(), res)
	if len(res.MountsWhileRestored) != 0 {
		t.Errorf("symlink mode made mounts: %v", res.MountsWhileRestored)
	}
}
