package cli_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/csikit/csikit/examples/refserver/cli"
)

// TestCLI_TLS: tls init writes the files a server loads; a client
// command verifies the server with -tls-ca or $REFSERVER_TLS_CA and
// fails without; TLS flags given in part are a usage error.
func TestCLI_TLS(t *testing.T) {
	dir := filepath.Join(shortTempDir(t), "tls")
	if out, errOut, code := runCLI(t, "tls", "init", "-dir", dir); code != cli.ExitOK {
		t.Fatalf("tls init: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := runCLI(t, "tls", "init", "-dir", dir); code != cli.ExitUsage {
		t.Fatalf("tls init over an existing CA: exit %d, want %d\n%s", code, cli.ExitUsage, errOut)
	}
	ca := filepath.Join(dir, "ca.pem")
	if _, errOut, code := runCLI(t, "server", "-dev", "-addr", "127.0.0.1:0", "-tls-ca", ca); code != cli.ExitUsage {
		t.Fatalf("server with -tls-ca alone: exit %d, want %d\n%s", code, cli.ExitUsage, errOut)
	}
	url, stop := runServerMode(t, "-tls-cert", filepath.Join(dir, "server.pem"), "-tls-key", filepath.Join(dir, "server-key.pem"), "-tls-ca", ca)
	defer stop()
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("listening on %q, want https://", url)
	}
	t.Setenv(cli.TLSCAEnv, "")
	if _, errOut, code := runCLI(t, "volume", "status", "-timeout", "5s", "-address", url); code == cli.ExitOK {
		t.Fatalf("volume status without the CA succeeded\n%s", errOut)
	}
	if _, errOut, code := runCLI(t, "volume", "status", "-address", url, "-tls-ca", ca); code != cli.ExitOK {
		t.Fatalf("volume status -tls-ca: exit %d\n%s", code, errOut)
	}
	t.Setenv(cli.TLSCAEnv, ca)
	if _, errOut, code := runCLI(t, "volume", "status", "-address", strings.TrimPrefix(url, "https://")); code != cli.ExitOK {
		t.Fatalf("volume status with $%s: exit %d\n%s", cli.TLSCAEnv, code, errOut)
	}
}
