package cli_test

import (
	"context"
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/cli"
	"github.com/csikit/csikit/examples/refserver/internal/tlsconf"
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

// TestCLI_TLS_ServerAndAgentModes: a server and an agent run with the
// certificates of tls init; the agent registers over https, and a claim
// with -mount reaches it over mutual TLS with the server's certificate.
func TestCLI_TLS_ServerAndAgentModes(t *testing.T) {
	dir := shortTempDir(t)
	tdir := filepath.Join(dir, "tls")
	if _, errOut, code := runCLI(t, "tls", "init", "-dir", tdir); code != cli.ExitOK {
		t.Fatalf("tls init: exit %d\n%s", code, errOut)
	}
	files := func(part string) []string {
		return []string{"-tls-cert", filepath.Join(tdir, part+".pem"), "-tls-key", filepath.Join(tdir, part+"-key.pem"), "-tls-ca", filepath.Join(tdir, "ca.pem")}
	}
	url, stop := runServerMode(t, files("server")...)
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, append([]string{"agent", "-server", url, "-node-id", "node-1", "-addr", "127.0.0.1:0",
			"-data-dir", filepath.Join(dir, "agent"), "-hostpath-data-dir", filepath.Join(dir, "plugin"), "-hostpath-mount", "symlink"},
			files("agent")...), &out, &errOut)
	}()
	defer func() {
		cancel()
		if code := <-done; code != cli.ExitOK {
			t.Errorf("agent exit %d\nstderr:\n%s", code, errOut.String())
		}
	}()
	t.Setenv(cli.TLSCAEnv, filepath.Join(tdir, "ca.pem"))
	pool, err := tlsconf.LoadCA(filepath.Join(tdir, "ca.pem"))
	must(t, err)
	client, err := api.NewTLSClient(url, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	must(t, err)
	defer client.Close()
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	if _, err := client.WaitPlugin(wctx, "hostpath", func(p *csi.Plugin) bool { return p != nil && p.NodesHealthy == 1 }); err != nil {
		t.Fatalf("the agent did not register over TLS: %v\nstderr:\n%s", err, errOut.String())
	}
	for _, args := range [][]string{
		{"volume", "create", "-address", url, "-plugin", "hostpath", "-capability", "single-node-writer", "data"},
		{"claim", "-address", url, "-volume", "data", "-alloc", "web-1", "-node", "node-1", "-mount"},
	} {
		if o, e, code := runCLI(t, args...); code != cli.ExitOK {
			t.Fatalf("%v: exit %d\n%s%s", args, code, o, e)
		}
	}
}
