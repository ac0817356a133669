package cli

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/cluster"
	"github.com/csikit/csikit/state/sealed"
)

// keyringDirFlag defines -keyring-dir on the server and the keyring
// commands.
func keyringDirFlag(fs *flag.FlagSet) *string {
	return fs.String("keyring-dir", "", "the keyring that seals the raft log and snapshots (default DATA_DIR/"+cluster.KeyringDir+
		" for a single server); the servers of a cluster need the same keys: give each a copy of one keyring dir (see refserver keyring)")
}

// keyringCmd runs one keyring command: it parses args (-keyring-dir or
// -data-dir), then runs run on the keyring dir they name; an error of
// run fails the command.
func (e *env) keyringCmd(name, help, example string, args []string, run func(dir string) error) int {
	fs := e.modeFlags("keyring "+name, help, example)
	dir := keyringDirFlag(fs)
	dataDir := fs.String("data-dir", "", "the server's data dir, whose "+cluster.KeyringDir+" dir is used without -keyring-dir (default "+defaultDataDir()+")")
	code := ExitOK
	if !e.parseMode(fs, args, &code) {
		return code
	}
	var err error
	switch {
	case *dir != "" && *dataDir != "":
		err = fmt.Errorf("%w: give -keyring-dir or -data-dir, not both", csi.ErrInvalidRequest)
	case *dir != "":
		err = run(*dir)
	case *dataDir != "":
		err = run(filepath.Join(*dataDir, cluster.KeyringDir))
	default:
		err = run(filepath.Join(defaultDataDir(), cluster.KeyringDir))
	}
	if err != nil {
		return e.modeFail("keyring "+name, err)
	}
	return ExitOK
}

func (e *env) keyringInit(_ context.Context, args []string) int {
	return e.keyringCmd("init", "Creates a keyring dir (0700) with its first key (0600), for the servers of a cluster to share: "+
		"copy the dir to every server and start each with -keyring-dir. A dir that holds keys already is left as it is.",
		"refserver keyring init -keyring-dir /etc/refserver/keyring", args, func(dir string) error {
			if _, err := sealed.Read(dir); err == nil {
				return fmt.Errorf("%w: keyring dir %s holds keys already; see refserver keyring list", csi.ErrInvalidRequest, dir)
			}
			k, err := sealed.Load(dir)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "keyring created in %s with key %d; copy the dir to every server of the cluster and pass -keyring-dir\n", dir, k.PrimaryID())
			return nil
		})
}

func (e *env) keyringRotate(_ context.Context, args []string) int {
	return e.keyringCmd("rotate", "Adds a new primary key to a keyring dir; the old keys stay, so what they sealed still opens. "+
		"A server seals with the new key from its next start. In a cluster, copy the new key file into every server's keyring dir before restarting any: "+
		"a server that lacks the key the leader seals with stops (its state diverged) instead of skipping the write.",
		"refserver keyring rotate -keyring-dir /etc/refserver/keyring", args, func(dir string) error {
			id, err := sealed.Rotate(dir)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "key %d added to %s as %s, the primary from each server's next start\n", id, dir, sealed.KeyFile(id))
			fmt.Fprintf(e.stdout, "copy %s (mode 0600) into every server's keyring dir, then restart the servers one at a time\n", filepath.Join(dir, sealed.KeyFile(id)))
			return nil
		})
}

func (e *env) keyringList(_ context.Context, args []string) int {
	return e.keyringCmd("list", "Lists the keys of a keyring dir by ID and file, and which is the primary (the one a server started now seals with). Key values are never printed.",
		"refserver keyring list -keyring-dir /etc/refserver/keyring", args, func(dir string) error {
			k, err := sealed.Read(dir)
			if err != nil {
				return err
			}
			for _, id := range k.KeyIDs() {
				primary := ""
				if id == k.PrimaryID() {
					primary = "  primary"
				}
				fmt.Fprintf(e.stdout, "%d  %s%s\n", id, sealed.KeyFile(id), primary)
			}
			return nil
		})
}
