//go:build linux

package mounter

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// statFile reads the link count and size fstat would, through statx or,
// where statx is refused, through fstat itself.
func TestStatFile(t *testing.T) {
	dir := t.TempDir()
	open := func(t *testing.T, name string, size int) *os.File {
		t.Helper()
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		if _, err := f.Write(make([]byte, size)); err != nil {
			t.Fatal(err)
		}
		return f
	}
	refused := func(errno error) func(int, string, int, int, *unix.Statx_t) error {
		return func(int, string, int, int, *unix.Statx_t) error { return errno }
	}
	for _, tc := range []struct {
		name   string
		statx  func(int, string, int, int, *unix.Statx_t) error
		size   int
		remove bool // unlink the file before the stat
		link   bool // give the file a second name
	}{
		{name: "statx", statx: unix.Statx, size: 8192},
		{name: "statx, empty file", statx: unix.Statx},
		{name: "statx, removed", statx: unix.Statx, size: 100, remove: true},
		{name: "statx, two names", statx: unix.Statx, size: 100, link: true},
		{name: "no statx (ENOSYS)", statx: refused(unix.ENOSYS), size: 8192},
		{name: "statx filtered (EPERM), removed", statx: refused(unix.EPERM), size: 100, remove: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Cleanup(func() { statx = unix.Statx })
			f := open(t, "f", tc.size)
			if tc.remove {
				if err := os.Remove(f.Name()); err != nil {
					t.Fatal(err)
				}
			}
			if tc.link {
				if err := os.Link(f.Name(), f.Name()+".2"); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = os.Remove(f.Name() + ".2") })
			}
			var want syscall.Stat_t
			if err := syscall.Fstat(int(f.Fd()), &want); err != nil {
				t.Fatal(err)
			}
			statx = tc.statx
			nlink, size, err := statFile(f, unix.STATX_NLINK|unix.STATX_SIZE)
			if err != nil {
				t.Fatal(err)
			}
			if uint64(nlink) != uint64(want.Nlink) || size != want.Size {
				t.Errorf("statFile = nlink %d, size %d; fstat says nlink %d, size %d", nlink, size, want.Nlink, want.Size)
			}
			if got := linked(f); got != (want.Nlink > 0) {
				t.Errorf("linked = %v with %d links", got, want.Nlink)
			}
		})
	}
}

// A statx error other than a refusal is an error, not a silent fstat,
// and names the file; a closed file is one.
func TestStatFile_Errors(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if _, _, err := statFile(f, unix.STATX_SIZE); err == nil {
		t.Fatal("statFile of a closed file: no error")
	}
	t.Cleanup(func() { statx = unix.Statx })
	statx = func(int, string, int, int, *unix.Statx_t) error { return unix.EIO }
	g, err := os.Create(filepath.Join(t.TempDir(), "g"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	_, _, err = statFile(g, unix.STATX_SIZE)
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Op != "statx" || pe.Path != g.Name() || !errors.Is(err, unix.EIO) {
		t.Fatalf("statFile with statx failing EIO = %v, want a statx PathError for %s wrapping EIO", err, g.Name())
	}
	if linked(g) {
		t.Error("linked is true for a file it could not stat")
	}
}

// readFile reads what os.ReadFile reads, at sizes around its buffer's
// edges, and reports a missing file as fs.ErrNotExist.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{0, 1, 511, 512, 4096, 8192, 8193, 70000} {
		p := filepath.Join(dir, "f")
		want := bytes.Repeat([]byte{'x', 'y', 'z'}, size/3+1)[:size]
		if err := os.WriteFile(p, want, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := readFile(p)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("size %d: read %d bytes that differ from the file's", size, len(got))
		}
	}
	if _, err := readFile(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("readFile of a missing file = %v, want fs.ErrNotExist", err)
	}
	// A directory opens but does not read.
	if _, err := readFile(dir); err == nil {
		t.Error("readFile of a directory: no error")
	}
}

// statDir says what os.Stat's IsDir says, links followed, through statx
// or, where statx is refused, through stat itself.
func TestStatDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { statx = unix.Statx })
	for _, refuse := range []error{nil, unix.ENOSYS, unix.EPERM} {
		statx = unix.Statx
		if refuse != nil {
			statx = func(int, string, int, int, *unix.Statx_t) error { return refuse }
		}
		for _, p := range []string{dir, file, filepath.Join(dir, "link"), filepath.Join(dir, "missing")} {
			got, err := statDir(p)
			fi, want := os.Stat(p)
			if (err == nil) != (want == nil) || (err == nil && got != fi.IsDir()) {
				t.Errorf("statx refused with %v: statDir(%s) = %v, %v; os.Stat says dir %v, %v", refuse, p, got, err, want == nil && fi.IsDir(), want)
			}
			if want != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("statDir(%s) = %v, want fs.ErrNotExist", p, err)
			}
		}
	}
}

// readFile leaves a file's access time alone where os.ReadFile moves it
// (relatime: the file was written since it was last read).
func TestReadFile_KeepsAccessTime(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	atime := func(p string) time.Time { return accessTime(t, p) }
	stale := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("record"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, time.Now()); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ref := stale("ref")
	if _, err := os.ReadFile(ref); err != nil {
		t.Fatal(err)
	}
	if atime(ref).Equal(old) {
		t.Skip("the file system does not update access times on read (noatime); nothing to keep")
	}
	p := stale("f")
	if _, err := readFile(p); err != nil {
		t.Fatal(err)
	}
	if got := atime(p); !got.Equal(old) {
		t.Errorf("readFile moved the access time from %v to %v", old, got)
	}
}

// A store just opened reads its file and writes it through a new
// mapping without moving the file's access time (a mapping counts as an
// access), where a plain open would (relatime: the file was written
// since it was last read).
func TestStore_KeepsAccessTime(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, false)
	if err := s.save(testRecord("a", 1)); err != nil {
		t.Fatal(err)
	}
	p := s.path(s.vols[volKey{"default", "vol1"}].file)
	closeAll(s)
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	atime := func() time.Time { return accessTime(t, p) }
	if err := os.Chtimes(p, old, time.Now()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	_ = syscall.Munmap(m)
	_ = f.Close()
	if atime().Equal(old) {
		t.Skip("the file system does not update access times (noatime); nothing to keep")
	}
	if err := os.Chtimes(p, old, time.Now()); err != nil {
		t.Fatal(err)
	}
	r, recs := reload(t, dir, false)
	if len(recs) != 1 {
		t.Fatalf("reloaded %d records, want 1", len(recs))
	}
	if err := r.note(testRecord("b", 1)); err != nil {
		t.Fatal(err)
	}
	if f := r.vols[volKey{"default", "vol1"}].file; f.mapped == nil {
		t.Fatal("the write did not go through a mapping")
	}
	closeAll(r)
	if got := atime(); !got.Equal(old) {
		t.Errorf("the store moved its file's access time from %v to %v", old, got)
	}
}

// accessTime returns the access time of the file at p.
func accessTime(t *testing.T, p string) time.Time {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return time.Unix(st.Atim.Unix())
}
