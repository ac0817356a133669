//go:build linux

package hostpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// bindMount bind-mounts source on target, then remounts it read-only when
// readonly is set. A failed remount undoes the bind mount, so the caller
// never sees a writable mount where it asked for a read-only one.
func bindMount(source, target string, readonly bool) error {
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount %s on %s: %w", source, target, err)
	}
	if !readonly {
		return nil
	}
	// A read-only bind needs a second mount call. Flags the kernel may
	// have locked on the mount (nosuid, nodev, noexec, atime handling,
	// e.g. inside a user namespace) must be repeated or the remount is
	// refused, so they are read back first.
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil {
		_ = unix.Unmount(target, 0)
		return fmt.Errorf("read mount flags of %s: %w", target, err)
	}
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY)
	for _, f := range []struct{ st, ms uintptr }{
		{unix.ST_NOSUID, unix.MS_NOSUID},
		{unix.ST_NODEV, unix.MS_NODEV},
		{unix.ST_NOEXEC, unix.MS_NOEXEC},
		{unix.ST_NOATIME, unix.MS_NOATIME},
		{unix.ST_NODIRATIME, unix.MS_NODIRATIME},
		{unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if uintptr(st.Flags)&f.st != 0 {
			flags |= f.ms
		}
	}
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		_ = unix.Unmount(target, 0)
		return fmt.Errorf("remount %s read-only: %w", target, err)
	}
	return nil
}

// unmount unmounts target. A target that is not a mount point (EINVAL)
// is not an error: the work is already done.
func unmount(target string) error {
	err := unix.Unmount(target, 0)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return fmt.Errorf("unmount %s: %w", target, err)
}

// isMountPoint reports whether path is a mount point of this process's
// mount namespace, by looking it up in /proc/self/mountinfo.
func isMountPoint(path string) (bool, error) {
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return false, err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	mps, err := mountPoints(f)
	if err != nil {
		return false, err
	}
	return slices.Contains(mps, resolved), nil
}

// volumeUsage returns the file system figures of path: bytes and inodes.
func volumeUsage(path string) (bytes, inodes usage, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return usage{}, usage{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	bs := st.Frsize
	if bs == 0 {
		bs = st.Bsize
	}
	bytes = usage{
		total:     int64(st.Blocks) * bs,
		available: int64(st.Bavail) * bs,
		used:      int64(st.Blocks-st.Bfree) * bs,
	}
	inodes = usage{
		total:     int64(st.Files),
		available: int64(st.Ffree),
		used:      int64(st.Files - st.Ffree),
	}
	return bytes, inodes, nil
}
