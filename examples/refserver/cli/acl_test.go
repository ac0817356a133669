package cli_test

import (
	"strings"
	"testing"

	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/cli"
)

// TestCLI_ACL runs a server with -acl and the acl commands against it:
// the bootstrap prints a management token once, the client commands
// take it from -token or $CSIKIT_TOKEN and are refused without it, a
// namespace token is made, listed without its secret, and revoked.
func TestCLI_ACL(t *testing.T) {
	url, stop := runServerMode(t, "-acl")
	run := func(args ...string) (string, string, int) {
		t.Helper()
		return runCLI(t, append(args, "-address", url)...)
	}
	okRun := func(args ...string) string {
		t.Helper()
		out, errOut, code := run(args...)
		if code != cli.ExitOK {
			t.Fatalf("refserver %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	if _, errOut, code := run("plugin", "status"); code != cli.ExitError || !strings.Contains(errOut, "permission denied") {
		t.Fatalf("plugin status without a token: exit %d, %s; want a refusal", code, errOut)
	}
	mgmt := strings.TrimSpace(okRun("acl", "bootstrap", "-quiet"))
	if len(mgmt) < 32 || strings.ContainsAny(mgmt, " \n") {
		t.Fatalf("acl bootstrap -quiet printed %q, want the secret alone", mgmt)
	}
	if _, errOut, code := run("acl", "bootstrap"); code != cli.ExitError || !strings.Contains(errOut, "bootstrapped already") {
		t.Fatalf("a second acl bootstrap: exit %d, %s", code, errOut)
	}
	okRun("plugin", "status", "-token", mgmt)
	t.Setenv(cli.TokenEnv, mgmt)
	okRun("plugin", "status")

	out := okRun("acl", "create", "-namespace", "team-a", "-permission", "volume-read,plugin-read", "team-a")
	if !strings.Contains(out, "Token team-a (namespaces team-a, permissions volume-read,plugin-read)") || !strings.Contains(out, "Secret: ") {
		t.Fatalf("acl create printed:\n%s", out)
	}
	team := strings.TrimSpace(out[strings.Index(out, "Secret: ")+len("Secret: "):])
	team, _, _ = strings.Cut(team, "\n")
	okRun("volume", "status", "-namespace", "team-a", "-token", team)
	if _, errOut, code := run("volume", "status", "-namespace", "team-b", "-token", team); code != cli.ExitError || !strings.Contains(errOut, "permission denied") {
		t.Fatalf("the team token in another namespace: exit %d, %s", code, errOut)
	}
	if _, errOut, code := run("acl", "create", "-permission", "root", "x"); code != cli.ExitUsage || !strings.Contains(errOut, "root") {
		t.Fatalf("an unknown permission: exit %d, %s", code, errOut)
	}
	toks := decodeJSON[[]api.ACLToken](t, okRun("acl", "list", "-json"))
	if len(toks) != 2 || toks[0].Name != "management" || toks[1].Name != "team-a" || toks[0].Token != "" || toks[1].Token != "" {
		t.Fatalf("acl list: %+v", toks)
	}
	okRun("acl", "delete", "team-a")
	if _, _, code := run("volume", "status", "-namespace", "team-a", "-token", team); code != cli.ExitError {
		t.Fatalf("a revoked token: exit %d, want a refusal", code)
	}
	code, serverOut := stop()
	if code != cli.ExitOK {
		t.Fatalf("server exited %d:\n%s", code, serverOut)
	}
	for _, secret := range []string{mgmt, team} {
		if strings.Contains(serverOut, secret) {
			t.Errorf("the server printed a token secret:\n%s", serverOut)
		}
	}
}
