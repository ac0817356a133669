//go:build linux

package mounter

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// linked is true for an open file with a name and false once the name
// is gone, removed or replaced by a rename.
func TestLinked(t *testing.T) {
	dir := t.TempDir()
	open := func(name string) *os.File {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
	kept, removed, replaced := open("kept"), open("removed"), open("replaced")
	if err := os.Remove(removed.Name()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(replaced.Name()+".new", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(replaced.Name()+".new", replaced.Name()); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[*os.File]bool{kept: true, removed: false, replaced: false} {
		if got := linked(f); got != want {
			t.Errorf("linked(%s) = %v, want %v", filepath.Base(f.Name()), got, want)
		}
	}
	closed := open("closed")
	_ = closed.Close()
	if linked(closed) {
		t.Error("linked is true for a closed file")
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
