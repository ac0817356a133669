package mounter

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// ensureDir (for the root and the state directory, where links are
// the host's) creates what os.MkdirAll would, takes an existing
// directory (or a link to one) as it is, and refuses a file or a
// dangling link where the directory should be, as MkdirAll does.
// Beneath the root, links are refused (TestTree).
func TestEnsureDir(t *testing.T) {
	type mkdir func(base, p string) error
	funcs := map[string]mkdir{
		"ensureDir": func(_, p string) error { return ensureDir(p, 0o750) },
	}
	for name, mk := range funcs {
		t.Run(name, func(t *testing.T) {
			for _, tc := range []struct {
				name    string
				setup   func(t *testing.T, base string)
				p       string // below base
				wantErr error  // nil: p is a directory afterwards
			}{
				{name: "missing", p: "a"},
				{name: "missing parents", p: "a/b/c"},
				{name: "existing", setup: func(t *testing.T, base string) { mustMkdir(t, filepath.Join(base, "a")) }, p: "a"},
				{name: "link to a directory", setup: func(t *testing.T, base string) {
					mustMkdir(t, filepath.Join(base, "real"))
					mustSymlink(t, "real", filepath.Join(base, "a"))
				}, p: "a"},
				{name: "a file", setup: func(t *testing.T, base string) { mustWrite(t, filepath.Join(base, "a")) }, p: "a", wantErr: syscall.ENOTDIR},
				{name: "below a file", setup: func(t *testing.T, base string) { mustWrite(t, filepath.Join(base, "a")) }, p: "a/b", wantErr: syscall.ENOTDIR},
				{name: "dangling link", setup: func(t *testing.T, base string) { mustSymlink(t, "nowhere", filepath.Join(base, "a")) }, p: "a", wantErr: fs.ErrExist},
			} {
				t.Run(tc.name, func(t *testing.T) {
					base := t.TempDir()
					if tc.setup != nil {
						tc.setup(t, base)
					}
					p := filepath.Join(base, tc.p)
					err := mk(base, p)
					// os.MkdirAll is the reference.
					ref := t.TempDir()
					if tc.setup != nil {
						tc.setup(t, ref)
					}
					refErr := os.MkdirAll(filepath.Join(ref, tc.p), 0o750)
					if (err == nil) != (refErr == nil) {
						t.Fatalf("%s = %v, os.MkdirAll = %v", name, err, refErr)
					}
					if tc.wantErr != nil {
						if !errors.Is(err, tc.wantErr) {
							t.Fatalf("%s = %v, want %v", name, err, tc.wantErr)
						}
						return
					}
					if err != nil {
						t.Fatal(err)
					}
					if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
						t.Fatalf("after %s, %s is not a directory (%v)", name, p, err)
					}
				})
			}
		})
	}
}

// ensureDir gives a directory it creates the permissions asked (less
// the umask), and leaves an existing one's alone.
func TestEnsureDir_Perm(t *testing.T) {
	base := t.TempDir()
	p := filepath.Join(base, "records")
	if err := ensureDir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("created with %v, want -rwx------", fi.Mode().Perm())
	}
	if err := os.Chmod(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := ensureDir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o755 {
		t.Errorf("an existing directory's permissions changed to %v", fi.Mode().Perm())
	}
}

func mustMkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.Mkdir(p, 0o750); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, p string) {
	t.Helper()
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}
