package plugintest

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// lstat finds what os.Lstat finds: a directory, a file, a symbolic
// link (dangling or not, not followed), and reports a missing path, or
// one below a file, as os.Lstat does.
func TestLstat(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, "dangling")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path    string
		missing bool
	}{
		{path: dir},
		{path: file},
		{path: filepath.Join(dir, "dangling")},
		{path: filepath.Join(dir, "nowhere"), missing: true},
		{path: filepath.Join(file, "below"), missing: true},
	} {
		err := lstat(tc.path)
		_, want := os.Lstat(tc.path)
		if (err == nil) != (want == nil) {
			t.Errorf("lstat(%s) = %v, os.Lstat says %v", tc.path, err, want)
		}
		if tc.missing && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, errors.Unwrap(want)) {
			t.Errorf("lstat(%s) = %v, want the error os.Lstat gives (%v)", tc.path, err, want)
		}
		if !tc.missing && err != nil {
			t.Errorf("lstat(%s) = %v, want nil", tc.path, err)
		}
	}
}

// readDir lists what os.ReadDir lists, in the same order.
func TestReadDir(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"b", "a", "c.d", "A"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o750); err != nil {
		t.Fatal(err)
	}
	got, err := readDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("readDir listed %d entries, os.ReadDir %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Name() != want[i].Name() || got[i].IsDir() != want[i].IsDir() {
			t.Errorf("entry %d: %s (dir %v), os.ReadDir: %s (dir %v)", i, got[i].Name(), got[i].IsDir(), want[i].Name(), want[i].IsDir())
		}
	}
	if _, err := readDir(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("readDir of a missing directory = %v, want fs.ErrNotExist", err)
	}
	if _, err := readDir(filepath.Join(dir, "a")); err == nil {
		t.Error("readDir of a file: no error")
	}
}
