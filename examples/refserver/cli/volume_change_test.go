package cli_test

import (
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/cli"
	"github.com/csikit/csikit/rpcshim"
)

// TestCLI_VolumeExpandModify grows a mounted hostpath volume (controller
// and node steps through the real stack) and changes its label.
func TestCLI_VolumeExpandModify(t *testing.T) {
	c := startCluster(t)
	c.ok(t, "volume", "create", "-plugin", "hostpath", "-capacity-min", "1MiB", "-capability", "multi-node-multi-writer/file-system", "data")
	c.ok(t, "claim", "-volume", "data", "-alloc", "web-1", "-node", "node-2", "-mode", "write", "-mount")

	resp := decodeJSON[rpcshim.VolumeChangeResponse](t, c.ok(t, "volume", "expand", "-capacity", "4MiB", "-json", "data"))
	if e := resp.Volume.Expansion; resp.Volume.Capacity != 4<<20 || e == nil || e.State != csi.ExpansionDone || len(e.DoneNodes) != 1 || e.DoneNodes[0] != "node-2" {
		t.Fatalf("expand: capacity %d, expansion %+v", resp.Volume.Capacity, resp.Volume.Expansion)
	}
	// A node that mounts the volume after the expansion gets its node
	// step when it mounts.
	before := strings.Count(c.events.String(), "NodeExpandVolume")
	c.ok(t, "claim", "-volume", "data", "-alloc", "web-2", "-node", "node-1", "-mode", "write", "-mount")
	// The mount staged the volume and expanded it there; the server
	// records that step instead of sending NodeExpandVolume again.
	if n := strings.Count(c.events.String(), "NodeExpandVolume") - before; n != 1 {
		t.Errorf("%d NodeExpandVolume calls for the mount on node-1, want 1:\n%s", n, c.events.String())
	}
	vol := decodeJSON[csi.Volume](t, c.ok(t, "volume", "status", "-json", "data"))
	if e := vol.Expansion; len(e.DoneNodes) != 2 || e.DoneNodes[0] != "node-1" {
		t.Errorf("after a mount on node-1: expansion %+v", e)
	}
	status := c.ok(t, "volume", "status", "data")
	if !strings.Contains(status, "Capacity      4.0 MiB") || !strings.Contains(status, "Expansion     done, to 4.0 MiB") {
		t.Errorf("volume status after the expansion:\n%s", status)
	}
	_, errOut, code := c.run(t, "volume", "expand", "-capacity", "1MiB", "data")
	if code == cli.ExitOK || !strings.Contains(errOut, "shrink") {
		t.Errorf("shrink: exit %d, %s", code, errOut)
	}

	out := c.ok(t, "volume", "modify", "-param", hostpath.LabelParameter+"=gold", "data")
	if want := "Volume default/data modified: " + hostpath.LabelParameter + "=gold\n"; out != want {
		t.Errorf("modify output %q, want %q", out, want)
	}
	if status := c.ok(t, "volume", "status", "data"); !strings.Contains(status, "Mutable       "+hostpath.LabelParameter+"=gold") {
		t.Errorf("volume status after the modify:\n%s", status)
	}
	_, errOut, code = c.run(t, "volume", "modify", "-param", "iops=9", "data")
	if code == cli.ExitOK || !strings.Contains(errOut, "iops") {
		t.Errorf("modify of an unknown parameter: exit %d, %s", code, errOut)
	}
}
