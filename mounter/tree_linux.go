//go:build linux

package mounter

import (
	"errors"

	"golang.org/x/sys/unix"
)

// errLinkHere is removeNoLinks' answer for a name that is a symbolic
// link: the caller names it.
var errLinkHere = errors.New("is a symbolic link")

// The fast path of the tree (Linux): one openat2(2) with
// RESOLVE_NO_SYMLINKS opens a path only when no element of it, the last
// included, is a link, where the walk takes three calls per element. It
// decides only the plain case; anything else (a link, a missing
// element, a kernel without openat2) goes to the walk, which finds and
// names the cause. The paths are absolute and clean (tree.path), so no
// ".." can lead out of the root.
func openNoLinks(p string, flags uint64) (int, bool) {
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | flags,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	return fd, err == nil
}

// noLinks reports whether p exists with no link on it.
func noLinks(p string) bool {
	fd, ok := openNoLinks(p, 0)
	if ok {
		unix.Close(fd)
	}
	return ok
}

// removeNoLinks removes name (an empty directory, or anything else but a
// link) from directory dir, reached with no link on its path. handled is
// false when dir cannot be reached so: the walk takes over. A name that
// is a link is errLinkHere, and stays; one swapped in between the
// fstatat and the unlinkat is removed itself (unlinkat follows no link).
func removeNoLinks(dir, name string) (handled bool, err error) {
	fd, ok := openNoLinks(dir, unix.O_DIRECTORY)
	if !ok {
		return false, nil
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return true, err
	}
	flags := 0
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return true, errLinkHere
	case unix.S_IFDIR:
		flags = unix.AT_REMOVEDIR
	}
	return true, unix.Unlinkat(fd, name, flags)
}
