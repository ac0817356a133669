package cli_test

import (
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csikit/csikit/examples/refserver/cli"
	"github.com/csikit/csikit/state/sealed"
)

// TestCLI_Keyring makes a shared keyring, rotates it and lists it: the
// files are 0600, the new key is the primary, no key value is printed,
// and the commands refuse what would lose or fork keys (init over keys,
// rotate of nothing, -keyring-dir on a -dev server).
func TestCLI_Keyring(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keyring")
	if out, errOut, code := runCLI(t, "keyring", "rotate", "-keyring-dir", dir); code != cli.ExitError {
		t.Fatalf("rotate of an empty keyring: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code := runCLI(t, "keyring", "init", "-keyring-dir", dir)
	if code != cli.ExitOK {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	printed := out + errOut
	if _, _, code := runCLI(t, "keyring", "init", "-keyring-dir", dir); code != cli.ExitUsage {
		t.Fatalf("a second init: exit %d, want a refusal", code)
	}
	out, errOut, code = runCLI(t, "keyring", "rotate", "-keyring-dir", dir)
	if code != cli.ExitOK || !strings.Contains(out, "key 2 added") {
		t.Fatalf("rotate: exit %d\n%s%s", code, out, errOut)
	}
	printed += out + errOut
	out, errOut, code = runCLI(t, "keyring", "list", "-keyring-dir", dir)
	want := "1  key-00000001\n2  key-00000002  primary\n"
	if code != cli.ExitOK || out != want {
		t.Fatalf("list: exit %d\n%s\nwant\n%s", code, out, want)
	}
	printed += out + errOut
	for _, id := range []uint32{1, 2} {
		path := filepath.Join(dir, sealed.KeyFile(id))
		fi, err := os.Stat(path)
		must(t, err)
		key, err := os.ReadFile(path)
		must(t, err)
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("key %d: mode %v, want 0600", id, fi.Mode().Perm())
		}
		for _, form := range []string{string(key), hex.EncodeToString(key), base64.StdEncoding.EncodeToString(key), base64.RawURLEncoding.EncodeToString(key)} {
			if strings.Contains(printed, form) {
				t.Errorf("key %d was printed by a keyring command", id)
			}
		}
	}
	k, err := sealed.Read(dir)
	must(t, err)
	if k.PrimaryID() != 2 {
		t.Errorf("primary %d after rotate, want 2", k.PrimaryID())
	}
	if _, _, code := runCLI(t, "server", "-dev", "-keyring-dir", dir); code != cli.ExitUsage {
		t.Errorf("server -dev -keyring-dir: exit %d, want a usage error", code)
	}
}
