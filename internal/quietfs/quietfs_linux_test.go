//go:build linux

package quietfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// refuse makes statx fail with errno for the rest of the test; a nil
// errno makes it succeed with nothing filled in.
func refuse(t *testing.T, errno error) {
	t.Cleanup(func() { statx = unix.Statx })
	statx = func(_ int, _ string, _, _ int, sx *unix.Statx_t) error {
		*sx = unix.Statx_t{}
		return errno
	}
}

// Stat reads the link count and size fstat would, through statx or,
// where statx is refused, through fstat itself.
func TestStat(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		refused error // statx's error, if refused
		size    int
		remove  bool // unlink the file before the stat
		link    bool // give the file a second name
		partial bool // statx succeeds without filling the fields in
	}{
		{name: "statx", size: 8192},
		{name: "statx, empty file"},
		{name: "statx, removed", size: 100, remove: true},
		{name: "statx, two names", size: 100, link: true},
		{name: "no statx (ENOSYS)", refused: unix.ENOSYS, size: 8192},
		{name: "statx filtered (EPERM), removed", refused: unix.EPERM, size: 100, remove: true},
		{name: "statx fills nothing in", partial: true, size: 100, link: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, "f")
			f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.Write(make([]byte, tc.size)); err != nil {
				t.Fatal(err)
			}
			if tc.remove {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
			}
			if tc.link {
				if err := os.Link(p, p+".2"); err != nil {
					t.Fatal(err)
				}
				defer os.Remove(p + ".2")
			}
			var want syscall.Stat_t
			if err := syscall.Fstat(int(f.Fd()), &want); err != nil {
				t.Fatal(err)
			}
			if tc.refused != nil || tc.partial {
				refuse(t, tc.refused)
			}
			nlink, size, err := Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			if nlink != uint64(want.Nlink) || size != want.Size {
				t.Errorf("Stat = nlink %d, size %d; fstat says nlink %d, size %d", nlink, size, want.Nlink, want.Size)
			}
		})
	}
}

// A statx error other than a refusal is an error that names the file,
// not a silent fstat; a closed file is one.
func TestStat_Errors(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if _, _, err := Stat(f); err == nil {
		t.Fatal("Stat of a closed file: no error")
	}
	g, err := os.Create(filepath.Join(t.TempDir(), "g"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	refuse(t, unix.EIO)
	_, _, err = Stat(g)
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Op != "statx" || pe.Path != g.Name() || !errors.Is(err, unix.EIO) {
		t.Fatalf("Stat with statx failing EIO = %v, want a statx PathError for %s wrapping EIO", err, g.Name())
	}
}

// Where statx is refused, IsDir and Lexists still say what os.Stat and
// os.Lstat say.
func TestIsDirAndLexists_Refused(t *testing.T) {
	for name, errno := range map[string]error{"ENOSYS": unix.ENOSYS, "EPERM": unix.EPERM, "nothing filled in": nil} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, "dangling")); err != nil {
				t.Fatal(err)
			}
			refuse(t, errno)
			for _, p := range []string{dir, filepath.Join(dir, "dangling"), filepath.Join(dir, "missing")} {
				checkLikeOS(t, p)
			}
		})
	}
}

// ReadFile, and a mapping of a file opened with Open, leave its access
// time alone, and ReadDir a directory's, where os.ReadFile, mmap and
// os.ReadDir move them (relatime: changed since last read).
func TestKeepsAccessTime(t *testing.T) {
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	// stale returns a file (or directory) changed since its last access.
	stale := func(dir bool) string {
		p := filepath.Join(t.TempDir(), "x")
		var err error
		if dir {
			if err = os.Mkdir(p, 0o750); err == nil {
				err = os.WriteFile(filepath.Join(p, "f"), nil, 0o600)
			}
		} else {
			err = os.WriteFile(p, []byte("record"), 0o600)
		}
		if err == nil {
			err = os.Chtimes(p, old, time.Now())
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	mapping := func(open func(string, int) (*os.File, error)) func(string) error {
		return func(p string) error {
			f, err := open(p, os.O_RDWR)
			if err != nil {
				return err
			}
			defer f.Close()
			m, err := syscall.Mmap(int(f.Fd()), 0, 6, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
			if err != nil {
				return err
			}
			return syscall.Munmap(m)
		}
	}
	osOpen := func(p string, flag int) (*os.File, error) { return os.OpenFile(p, flag, 0) }
	for _, tc := range []struct {
		name      string
		dir       bool
		os, quiet func(string) error
	}{
		{"read", false, func(p string) error { _, err := os.ReadFile(p); return err }, func(p string) error { _, err := ReadFile(p); return err }},
		{"mapping", false, mapping(osOpen), mapping(Open)},
		{"directory listing", true, func(p string) error { _, err := os.ReadDir(p); return err }, func(p string) error { _, err := ReadDir(p); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := stale(tc.dir)
			if err := tc.os(ref); err != nil {
				t.Fatal(err)
			}
			if accessTime(t, ref).Equal(old) {
				t.Skip("the file system does not move access times here (noatime); nothing to keep")
			}
			p := stale(tc.dir)
			if err := tc.quiet(p); err != nil {
				t.Fatal(err)
			}
			if got := accessTime(t, p); !got.Equal(old) {
				t.Errorf("the access time moved from %v to %v", old, got)
			}
		})
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
