package cli_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csikit/csikit/examples/refserver/cli"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		must(t, os.MkdirAll(filepath.Dir(path), 0o755))
		must(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to write it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -run %s -update rewrites it):\n--- got\n%s\n--- want\n%s", path, t.Name(), got, want)
	}
}

// stableEnv makes the defaults that help shows independent of the
// machine.
func stableEnv(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/var/lib/state")
	t.Setenv(cli.AddressEnv, "")
}

// TestCLI_Help_Golden: every command and subcommand answers -h and
// --help on stdout with exit 0, showing its flags and an example.
func TestCLI_Help_Golden(t *testing.T) {
	stableEnv(t)
	commands := [][]string{
		{}, {"demo"}, {"server"}, {"agent"}, {"version"}, {"completion"},
		{"volume"}, {"volume", "create"}, {"volume", "register"}, {"volume", "delete"}, {"volume", "status"}, {"volume", "place"}, {"volume", "health"},
		{"volume", "expand"}, {"volume", "modify"},
		{"volume", "snapshot"}, {"volume", "snapshot", "create"}, {"volume", "snapshot", "delete"}, {"volume", "snapshot", "list"},
		{"plugin"}, {"plugin", "status"}, {"node"}, {"node", "status"}, {"cluster"}, {"cluster", "status"},
		{"claim"}, {"release"}, {"tls"}, {"tls", "init"},
	}
	for _, cmd := range commands {
		name := strings.Join(append([]string{"refserver"}, cmd...), "_")
		t.Run(name, func(t *testing.T) {
			var first string
			for _, h := range []string{"-h", "--help"} {
				var out, errOut bytes.Buffer
				code := cli.Run(context.Background(), append(append([]string{}, cmd...), h), &out, &errOut)
				if code != cli.ExitOK || errOut.Len() > 0 {
					t.Fatalf("%s %s: exit %d, stderr:\n%s", strings.Join(cmd, " "), h, code, errOut.String())
				}
				if first == "" {
					first = out.String()
				} else if out.String() != first {
					t.Errorf("%s --help differs from -h:\n%s", strings.Join(cmd, " "), out.String())
				}
			}
			if !strings.Contains(first, "Example:") {
				t.Errorf("no example in the help of %s:\n%s", strings.Join(cmd, " "), first)
			}
			golden(t, filepath.Join("help", name+".txt"), first)
		})
	}
}

// TestCLI_Errors_Golden: the messages and exit codes of bad
// invocations, all found before any request is sent.
func TestCLI_Errors_Golden(t *testing.T) {
	stableEnv(t)
	cases := [][]string{
		{"frobnicate"},
		{"volume"},
		{"volume", "list"},
		{"claim"},
		{"claim", "-volume", "v", "-alloc", "a", "-node", "n", "-mode", "rw"},
		{"claim", "-volume", "v", "-alloc", "a", "-node", "n", "-access-mode", "rw-many"},
		{"claim", "-volume", "v", "-alloc", "a", "-node", "n", "-attachment-mode", "fs"},
		{"claim", "-volume", "bad id!", "-alloc", "a", "-node", "n"},
		{"volume", "create", "data"},
		{"volume", "create", "-plugin", "hostpath", "-capacity-min", "1XB", "data"},
		{"volume", "create", "-plugin", "hostpath", "-capability", "everything", "data"},
		{"volume", "status", "bad id!"},
		{"volume", "register", "-secret", "token", "data"},
		{"release", "bad id!"},
		{"release"},
		{"agent", "-hostpath-data-dir", "/tmp/x"},
		{"agent", "-node-id", "n1", "-plugin", "p=unix:///run/p.sock:nodee"},
		{"agent", "-node-id", "n1", "-hostpath-data-dir", "/tmp/x", "-heartbeat", "0s"},
		{"server", "-heartbeat-ttl", "-1s", "-dev"},
		{"server", "-dev", "-data-dir", "/tmp/x"},
		{"server", "-join", "127.0.0.1:1", "-dev"},
		{"server", "-bootstrap-expect", "3", "-join", "127.0.0.1:1"},
		{"server", "-bootstrap-expect", "3", "-data-dir", "/tmp/x", "-join", "ftp://a:1"},
		{"server", "-bootstrap-expect", "3", "-data-dir", "/tmp/x", "-join", "127.0.0.1:1", "-raft-advertise", "nowhere"},
		{"completion", "fish"},
	}
	var all strings.Builder
	for _, args := range cases {
		var out, errOut bytes.Buffer
		code := cli.Run(context.Background(), args, &out, &errOut)
		if code != cli.ExitUsage {
			t.Errorf("refserver %q: exit %d, want %d (usage)", args, code, cli.ExitUsage)
		}
		fmt.Fprintf(&all, "$ refserver %s\nexit %d\n%s%s\n", strings.Join(quoted(args), " "), code, out.String(), errOut.String())
	}
	golden(t, "errors.txt", all.String())
}

func quoted(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if strings.ContainsAny(a, " !") {
			out[i] = "'" + a + "'"
		}
	}
	return out
}
