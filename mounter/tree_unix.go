//go:build unix

package mounter

import (
	"errors"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// openAt is openat(2) with O_CLOEXEC, repeated when a signal interrupts
// it (possible on network and FUSE file systems).
func openAt(dirfd int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flags|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// dirFlags open a directory without following a link at the last
// element (the walk takes one element at a time, so at any element).
// oPath makes the descriptor one that only names the directory, where
// the system has O_PATH.
const dirFlags = unix.O_DIRECTORY | unix.O_NOFOLLOW | oPath

// isLinkAt reports whether name in dirfd is a symbolic link.
func isLinkAt(dirfd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// openRoot opens the root. With create, a root that is gone is made
// again, as New made it; without, its absence is an error matching
// fs.ErrNotExist. The root was resolved at New, so a link there now is
// refused too.
func (t *tree) openRoot(create bool) (int, error) {
	fd, err := openAt(unix.AT_FDCWD, t.root, dirFlags)
	if err == unix.ENOENT && create {
		if err := os.MkdirAll(t.root, 0o750); err != nil {
			return -1, err
		}
		fd, err = openAt(unix.AT_FDCWD, t.root, dirFlags)
	}
	if err != nil {
		if err != unix.ENOENT && isLinkAt(unix.AT_FDCWD, t.root) {
			return -1, &UnsafePathError{Path: t.root, Reason: "(the mount root) has become a symbolic link since the mounter started: put the directory back, or restart the node agent if the host moved the root on purpose"}
		}
		return -1, &fs.PathError{Op: "open", Path: t.root, Err: err}
	}
	return fd, nil
}

// openDir opens directory elems beneath the root, following no link;
// with create, it makes the missing directories (0750). The caller
// closes the descriptor.
func (t *tree) openDir(elems []string, create bool) (int, error) {
	root, err := t.openRoot(create)
	if err != nil || len(elems) == 0 {
		return root, err
	}
	defer unix.Close(root)
	if !t.walkOnly.Load() {
		fd, err := openBeneath(root, strings.Join(elems, "/"), unix.O_DIRECTORY)
		switch {
		case err == nil:
			return fd, nil
		case err == unix.ENOSYS || err == unix.EPERM:
			t.walkOnly.Store(true)
		case err == unix.ENOENT && !create:
			return -1, t.elemError("open", elems, err)
		}
		// Something to create, a link (ELOOP), a file in the way, a
		// rename racing the lookup (EAGAIN): the walk creates what is
		// missing and names the element at fault.
	}
	return t.walk(root, elems, create)
}

// walk opens elems beneath root one at a time with O_NOFOLLOW, making a
// missing one with mkdirat when create is set. The caller closes the
// descriptor returned; root stays open.
func (t *tree) walk(root int, elems []string, create bool) (int, error) {
	dir := root
	closeDir := func() {
		if dir != root {
			unix.Close(dir)
		}
	}
	for i, e := range elems {
		op := "open"
		fd, err := openAt(dir, e, dirFlags)
		if err == unix.ENOENT && create {
			op = "mkdir"
			if err = unix.Mkdirat(dir, e, 0o750); err == nil || err == unix.EEXIST {
				// EEXIST: made by another Mounter, or a link or file,
				// which the open refuses.
				op = "open"
				fd, err = openAt(dir, e, dirFlags)
			}
		}
		if err != nil {
			if err != unix.ENOENT && isLinkAt(dir, e) {
				err = t.linkError(elems[:i+1])
			} else {
				err = t.elemError(op, elems[:i+1], err)
			}
			closeDir()
			return -1, err
		}
		closeDir()
		dir = fd
	}
	return dir, nil
}

func (t *tree) mkdirElems(elems []string, leafAnyKind bool) error {
	if !leafAnyKind {
		fd, err := t.openDir(elems, true)
		if err != nil {
			return err
		}
		return unix.Close(fd)
	}
	last := len(elems) - 1
	parent, err := t.openDir(elems[:last], true)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	if err := unix.Mkdirat(parent, elems[last], 0o750); err != nil && err != unix.EEXIST {
		return t.elemError("mkdir", elems, err)
	}
	return nil
}

// checkElems opens the parent of the last element, which refuses a
// link on the way, and checks that element itself. A missing element
// or a file in the way ends the check without an error.
func (t *tree) checkElems(elems []string) error {
	if len(elems) == 0 {
		return nil
	}
	last := len(elems) - 1
	parent, err := t.openDir(elems[:last], false)
	var unsafe *UnsafePathError
	switch {
	case errors.As(err, &unsafe):
		return err
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.ENOTDIR):
		return nil
	case err != nil:
		return err
	}
	defer unix.Close(parent)
	if isLinkAt(parent, elems[last]) {
		return t.linkError(elems)
	}
	return nil
}

func (t *tree) removeElems(elems []string) error {
	last := len(elems) - 1
	parent, err := t.openDir(elems[:last], false)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	err = unlinkAt(parent, elems[last], unix.AT_REMOVEDIR)
	if err == unix.ENOTDIR {
		if isLinkAt(parent, elems[last]) {
			return t.linkError(elems)
		}
		// A file where the mounter made a directory: removed, as
		// os.Remove would.
		err = unlinkAt(parent, elems[last], 0)
	}
	if err != nil {
		return t.elemError("remove", elems, err)
	}
	return nil
}

// unlinkAt is unlinkat(2), repeated when a signal interrupts it.
func unlinkAt(dirfd int, name string, flags int) error {
	for {
		if err := unix.Unlinkat(dirfd, name, flags); err != unix.EINTR {
			return err
		}
	}
}
