package cli_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/demo"
	"github.com/csikit/csikit/examples/refserver/internal/tlsconf"
)

// TestCLI_Demo_InterruptedIntoClosedPipe runs the demo as
// `refserver | tee log` would, then does what Ctrl-C does there: tee
// dies (its read end of the pipe closes) and refserver gets SIGINT. The
// drain must run to its end all the same: no mount is left (checked in
// /proc/self/mountinfo; bind mounts as root) and the temporary
// directory is removed.
func TestCLI_Demo_InterruptedIntoClosedPipe(t *testing.T) {
	tmp := shortTempDir(t)
	p := startChild(t, []string{"TMPDIR=" + tmp}, "demo", "-addr", "127.0.0.1:0")
	url := p.waitLine(t, "[server] API listening on ")
	p.waitLine(t, "[demo] the cluster keeps serving until interrupted")
	// The demo runs with ACLs on, its hint names the file of its
	// management token; and over TLS, its hint names the CA.
	tokenFile := strings.TrimSuffix(p.waitLine(t, "[demo]   export CSIKIT_TOKEN=$(cat "), ")")
	token, err := os.ReadFile(tokenFile)
	must(t, err)
	_, caFile, _ := strings.Cut(p.waitLine(t, "[demo]   go run ./examples/refserver plugin status "), " -tls-ca ")
	// Claim the demo's volume again, mounted, so that the drain has a
	// claim to release and a mount to undo.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := tlsconf.LoadCA(caFile)
	must(t, err)
	client, err := api.NewTLSClient(url, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	must(t, err)
	defer client.Close()
	req := &api.ClaimRequest{AllocationID: "web-2", NodeID: demo.ClaimNode, Mode: csi.ClaimWrite, Mount: true}
	var ae *api.Error
	if _, err := client.Claim(ctx, demo.Namespace, demo.VolumeID, req); !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden {
		t.Fatalf("a claim without a token: %v, want 403", err)
	}
	claim, err := client.WithToken(strings.TrimSpace(string(token))).Claim(ctx, demo.Namespace, demo.VolumeID, req)
	must(t, err)
	if hostpath.CanBindMount() == nil {
		if left, err := demo.MountsUnder(tmp); err != nil || !slices.Contains(left, claim.Mount.Path) {
			t.Fatalf("mounts before the interrupt: %v, %v; want %s among them", left, err, claim.Mount.Path)
		}
	}
	must(t, p.stdout.Close())
	if code := p.stop(t, syscall.SIGINT); code != 0 {
		t.Fatalf("the demo exited %d after SIGINT with its stdout closed\nstdout:\n%s\nstderr:\n%s", code, p.out, p.errOut)
	}
	left, err := demo.MountsUnder(tmp)
	must(t, err)
	if len(left) > 0 {
		t.Errorf("mounts left after the interrupt: %v", left)
	}
	entries, err := os.ReadDir(tmp)
	must(t, err)
	for _, e := range entries {
		t.Errorf("left in the temporary directory: %s", e.Name())
	}
}
