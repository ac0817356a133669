//go:build linux

package plugintest

import (
	"errors"
	"io/fs"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// lstat checks that p exists, as os.Lstat does, without reading p's
// timestamps: statx(2) asks for the file type alone.
//
// The harness checks that the plugin made target_path, whose inode with
// a bind mount is the volume's root, and then writes the data check's
// file there. Since Linux 6.13 (multigrain timestamps) a read of a
// file's ctime, which lstat(2) returns, makes the kernel stamp the
// file's next change with a fine-grained time, which always moves: the
// write then dirties the inode of the plugin's directory, and on ext4
// the plugin's next fsync is slower for it (see the mounter's statFile).
// A harness should not slow the plugin it measures.
func lstat(p string) error {
	var sx unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_SYNC_AS_STAT, unix.STATX_TYPE, &sx)
	if err == unix.ENOSYS || err == unix.EPERM {
		// Before Linux 4.11, or behind a seccomp filter that predates
		// statx.
		_, err := os.Lstat(p)
		return err
	}
	if err != nil {
		return &fs.PathError{Op: "lstat", Path: p, Err: err}
	}
	return nil
}

// readDir lists directory p, as os.ReadDir does (sorted by name), with p
// opened O_NOATIME: a read of a directory that changed since it was
// last read moves its access time (relatime) and dirties its inode, and
// the harness lists the mount root's directories at the end of each run
// (leftovers), after the mounter changed them. Without the directory's
// ownership (or CAP_FOWNER), which O_NOATIME needs, p is read as
// os.ReadDir reads it.
func readDir(p string) ([]fs.DirEntry, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOATIME, 0)
	if errors.Is(err, unix.EPERM) {
		return os.ReadDir(p)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, err
}
