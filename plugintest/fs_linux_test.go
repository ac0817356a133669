//go:build linux

package plugintest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// readDir leaves a directory's access time alone where os.ReadDir moves
// it (relatime: the directory changed since it was last read).
func TestReadDir_KeepsAccessTime(t *testing.T) {
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	atime := func(p string) time.Time {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return time.Unix(st.Atim.Unix())
	}
	changed := func() string {
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, "f"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(d, old, time.Now()); err != nil {
			t.Fatal(err)
		}
		return d
	}
	ref := changed()
	if _, err := os.ReadDir(ref); err != nil {
		t.Fatal(err)
	}
	if atime(ref).Equal(old) {
		t.Skip("the file system does not update access times on read (noatime); nothing to keep")
	}
	d := changed()
	if _, err := readDir(d); err != nil {
		t.Fatal(err)
	}
	if got := atime(d); !got.Equal(old) {
		t.Errorf("readDir moved the access time from %v to %v", old, got)
	}
}
