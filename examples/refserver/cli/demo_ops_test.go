package cli_test

import (
	"strings"
	"testing"

	"github.com/csikit/csikit/examples/refserver/cli"
)

func TestCLI_DemoVolumeOps(t *testing.T) {
	out, errOut, code := runCLI(t, "demo", "-volume-ops", "-addr", "127.0.0.1:0", "-mount", "symlink")
	if code != cli.ExitOK || !strings.Contains(out, "[demo] done: created, written, snapshotted, expanded online, restored and read back") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

func TestCLI_DemoTwoDemosRefused(t *testing.T) {
	_, errOut, code := runCLI(t, "demo", "-volume-ops", "-placement", "-addr", "127.0.0.1:0")
	if code != cli.ExitUsage || !strings.Contains(errOut, "choose one") {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
}
