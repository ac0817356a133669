//go:build linux

package mounter

import "golang.org/x/sys/unix"

// openNoLinks is the tree's fast path: one openat2(2) opens p only when
// no element of it is a link, where the walk takes three calls per
// element. Anything else (a link, a missing element, a kernel without
// openat2) goes to the walk, which names the cause. p is absolute and
// clean (tree.path), so no ".." can lead out of the root.
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

// removeNoLinks removes name (an empty directory, or anything but a
// link, which is errLinkHere) from dir, reached with no link on its
// path; handled is false when it cannot be, for the walk. A link
// swapped in after the fstatat is removed itself (unlinkat follows none).
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
