package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/rpcshim"
)

// TestCLI_SnapshotRestore walks a volume's data through a snapshot on
// the hostpath plugin: create, write a file through a mount, snapshot,
// restore into a new volume and read the file back there.
func TestCLI_SnapshotRestore(t *testing.T) {
	c := startCluster(t)
	c.ok(t, "volume", "create", "-plugin", "hostpath", "data")
	claim := decodeJSON[api.ClaimResponse](t, c.ok(t, "claim", "-volume", "data", "-alloc", "web-1", "-node", "node-2", "-mode", "write", "-mount", "-json"))
	must(t, os.WriteFile(filepath.Join(claim.Mount.Path, "f.txt"), []byte("kept"), 0o644))

	snap := decodeJSON[rpcshim.SnapshotResponse](t, c.ok(t, "volume", "snapshot", "create", "-json", "data", "nightly"))
	if s := snap.Snapshot; !s.ReadyToUse || s.SourceVolumeID != "data" || s.ExternalID == "" || s.Secrets != nil {
		t.Fatalf("snapshot %+v", s)
	}
	if out := c.ok(t, "volume", "snapshot", "create", "data", "nightly"); !strings.Contains(out, snap.Snapshot.ExternalID) {
		t.Errorf("a repeated snapshot create: %q, want the same external ID %s", out, snap.Snapshot.ExternalID)
	}
	list := c.ok(t, "volume", "snapshot", "list")
	if !strings.Contains(list, "nightly") || !strings.Contains(list, "yes") {
		t.Errorf("snapshot list:\n%s", list)
	}
	if status := c.ok(t, "volume", "status", "data"); !strings.Contains(status, "nightly") {
		t.Errorf("volume status does not show the snapshot:\n%s", status)
	}

	c.ok(t, "volume", "create", "-plugin", "hostpath", "-snapshot", "nightly", "copy")
	restored := decodeJSON[api.ClaimResponse](t, c.ok(t, "claim", "-volume", "copy", "-alloc", "web-2", "-node", "node-1", "-mode", "write", "-mount", "-json"))
	got, err := os.ReadFile(filepath.Join(restored.Mount.Path, "f.txt"))
	must(t, err)
	if string(got) != "kept" {
		t.Errorf("restored volume holds %q, want the snapshot's %q", got, "kept")
	}
	_, errOut, code := c.run(t, "volume", "create", "-plugin", "hostpath", "-snapshot", "nightly", "-clone", "data", "both")
	if code == 0 || !strings.Contains(errOut, "not both") {
		t.Errorf("-snapshot with -clone: exit %d, %s", code, errOut)
	}
	c.ok(t, "volume", "snapshot", "delete", "nightly")
	_, errOut, code = c.run(t, "volume", "snapshot", "delete", "nightly")
	if code == 0 || !strings.Contains(errOut, csi.ErrSnapshotNotFound.Error()) {
		t.Errorf("a second delete: exit %d, %s; want snapshot not found", code, errOut)
	}
	c.ok(t, "release", "web-1")
	c.ok(t, "release", "web-2")
}
