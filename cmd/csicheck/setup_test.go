package main

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
)

// setupBound is how soon a run that cannot reach its plugin must end.
const setupBound = 2 * time.Second

// checkSetupFailure runs csicheck with args (its directories and
// --endpoint first) and requires exit code 2 within setupBound, stderr
// naming path and the flag, with want, and no word blaming the plugin.
func checkSetupFailure(t *testing.T, args []string, path string, want ...string) {
	t.Helper()
	start := time.Now()
	code, out, errOut := csicheck(t, append(args, "--timeout", "30s")...)
	if d := time.Since(start); d > setupBound {
		t.Errorf("csicheck took %s to give up; want at most %s", d, setupBound)
	}
	if code != exitUsage {
		t.Errorf("exit %d, want %d (setup)\n%s\n%s", code, exitUsage, out, errOut)
	}
	for _, w := range append([]string{"cannot connect to " + path + " (--endpoint): "}, want...) {
		if !strings.Contains(errOut, w) {
			t.Errorf("stderr lacks %q:\n%s", w, errOut)
		}
	}
	if strings.Contains(out+errOut, "spec requires") || strings.Contains(errOut, "Config.") {
		t.Errorf("a setup failure blames the plugin or names a Go field:\n%s\n%s", out, errOut)
	}
}

func TestRun_SetupFailures(t *testing.T) {
	dir := shortTemp(t)
	file := filepath.Join(dir, "file.sock")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = l.Close() // the socket file stays, nobody listens: refused
	dgram := filepath.Join(dir, "dgram.sock")
	pc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: dgram, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()

	for _, c := range []struct {
		name, endpoint string
		want           []string
	}{
		{"missing socket", filepath.Join(dir, "none.sock"), []string{"no such file or directory"}},
		{"missing socket, unix URL", "unix://" + filepath.Join(dir, "none.sock"), []string{"no such file or directory"}},
		{"regular file", file, []string{"not a socket (a regular file)"}},
		{"directory", dir, []string{"not a socket (a directory)"}},
		{"datagram socket", dgram, []string{"protocol wrong type for socket"}},
		{"refused", stale, []string{"connection refused"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := strings.TrimPrefix(c.endpoint, "unix://")
			checkSetupFailure(t, append(dirs(t), "--endpoint", c.endpoint), path, c.want...)
		})
	}
}

// A socket the caller may not open. Root passes permission checks, so
// as root the dial runs on a thread whose file-system user is nobody.
func TestRun_PermissionDenied(t *testing.T) {
	p := fake(t)
	dir := filepath.Dir(p.Endpoint())
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	args := append(dirs(t), "--endpoint", p.Endpoint())
	if os.Geteuid() == 0 {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		// Setfsuid returns the previous fsuid and never an error.
		prev, _ := unix.SetfsuidRetUid(65534)
		defer unix.Setfsuid(prev)
	} else if err := os.Chmod(dir, 0); err != nil {
		t.Fatal(err)
	} else {
		defer os.Chmod(dir, 0o700)
	}
	checkSetupFailure(t, args, p.Endpoint(), "permission denied", "run with the rights")
}

// A plugin that answers Unavailable to every call fails the fingerprint
// after a bounded number of tries, not after --timeout.
func TestRun_PersistentUnavailable(t *testing.T) {
	p := fake(t)
	for _, m := range []string{csitest.MethodProbe, csitest.MethodGetPluginInfo, csitest.MethodGetPluginCapabilities} {
		p.FailAlways(m, codes.Unavailable)
	}
	done := make(chan int, 1)
	var out, errOut string
	go func() {
		var code int
		code, out, errOut = csicheck(t, append(dirs(t), "--endpoint", p.Endpoint(), "--timeout", "1m")...)
		done <- code
	}()
	select {
	case code := <-done:
		if code != exitFail {
			t.Errorf("exit %d, want %d\n%s\n%s", code, exitFail, out, errOut)
		}
		if !strings.Contains(out, "Unavailable") {
			t.Errorf("the table does not show Unavailable:\n%s", out)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("csicheck still retries Unavailable after 20s; the retries are not bounded")
	}
}

// shortTemp is a directory with a path short enough for a unix socket.
func shortTemp(t *testing.T) string {
	d, err := os.MkdirTemp("", "cc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

// A message that tells what to change names csicheck's flag, not the
// plugintest.Config field behind it.
func TestRun_NamesFlags(t *testing.T) {
	p := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode})
	code, out, errOut := csicheck(t, append(dirs(t), "--endpoint", p.Endpoint())...)
	if code != exitFail {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "set --volume-id") || strings.Contains(out, "Config.") {
		t.Errorf("the table should name --volume-id, not a Config field:\n%s", out)
	}
}
