package quietfs

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// ReadFile reads what os.ReadFile reads, at sizes around its buffer's
// edges, and reports a missing file as fs.ErrNotExist and a directory
// as an error.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{0, 1, 511, 512, 4096, 8192, 8193, 70000} {
		p := filepath.Join(dir, "f")
		want := bytes.Repeat([]byte{'x', 'y', 'z'}, size/3+1)[:size]
		if err := os.WriteFile(p, want, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ReadFile(p)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("size %d: read %d bytes that differ from the file's", size, len(got))
		}
	}
	if _, err := ReadFile(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile of a missing file = %v, want fs.ErrNotExist", err)
	}
	if _, err := ReadFile(dir); err == nil {
		t.Error("ReadFile of a directory: no error")
	}
}

// ReadDir lists what os.ReadDir lists, in the same order, and fails as
// it does.
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
	got, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("ReadDir listed %d entries, os.ReadDir %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Name() != want[i].Name() || got[i].IsDir() != want[i].IsDir() {
			t.Errorf("entry %d: %s (dir %v), os.ReadDir: %s (dir %v)", i, got[i].Name(), got[i].IsDir(), want[i].Name(), want[i].IsDir())
		}
	}
	if _, err := ReadDir(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadDir of a missing directory = %v, want fs.ErrNotExist", err)
	}
	if _, err := ReadDir(filepath.Join(dir, "a")); err == nil {
		t.Error("ReadDir of a file: no error")
	}
}

// IsDir and Lexists say what os.Stat and os.Lstat say: links followed by
// the first and not by the second, errors alike.
func TestIsDirAndLexists(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, "dangling")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, file, filepath.Join(dir, "link"), filepath.Join(dir, "dangling"),
		filepath.Join(dir, "missing"), filepath.Join(file, "below")} {
		checkLikeOS(t, p)
	}
}

func checkLikeOS(t *testing.T, p string) {
	t.Helper()
	got, err := IsDir(p)
	fi, want := os.Stat(p)
	if (err == nil) != (want == nil) || (err == nil && got != fi.IsDir()) {
		t.Errorf("IsDir(%s) = %v, %v; os.Stat: %v", p, got, err, want)
	}
	if want != nil && !errors.Is(err, errors.Unwrap(want)) {
		t.Errorf("IsDir(%s) = %v, want the error os.Stat gives (%v)", p, err, want)
	}
	err = Lexists(p)
	_, want = os.Lstat(p)
	if (err == nil) != (want == nil) || (want != nil && !errors.Is(err, errors.Unwrap(want))) {
		t.Errorf("Lexists(%s) = %v; os.Lstat: %v", p, err, want)
	}
}
