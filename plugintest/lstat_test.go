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
