//go:build linux

package mounter

import (
	"os"
	"syscall"
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
// A file removed, or replaced by a rename, has none.
func linked(f *os.File) bool {
	var st syscall.Stat_t
	return syscall.Fstat(int(f.Fd()), &st) == nil && st.Nlink > 0
}
