//go:build linux

package mounter

import (
	"os"
	"syscall"

	"github.com/csikit/csikit/internal/quietfs"
)

// fdatasync flushes a file's data, and of its metadata only what is
// needed to read the data back: an overwrite in place that does not
// change the file's size skips the inode's timestamps.
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}

// linked reports whether f still has a name: its link count is above 0.
// A file removed, or replaced by a rename, has none. It reads the count
// without the file's timestamps (quietfs.Stat): the store checks its
// file before each write, and after an fstat the first write to a page
// of a new mapping (at each agent start, and in each plugintest run)
// took a fine-grained time that always dirtied the inode; on ext4 the
// plugin's next fsync was then about 1.5 times as slow
// (BenchmarkStore_NeighbourSync, fresh-neighbour-sync-vs-alone).
func linked(f *os.File) bool {
	nlink, _, err := quietfs.Stat(f)
	return err == nil && nlink > 0
}
