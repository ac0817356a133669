package mounter

import "golang.org/x/sys/unix"

// oPath opens a directory as a descriptor that only names it: no read
// permission needed, and it serves as the dirfd of the *at calls.
const oPath = unix.O_PATH

// openBeneath opens rel beneath the directory root in one call,
// refusing any symbolic link on the way (RESOLVE_NO_SYMLINKS, which
// also covers the last element) and any escape from root
// (RESOLVE_BENEATH). ENOSYS means a kernel older than 5.6.
func openBeneath(root int, rel string, flags int) (int, error) {
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_PATH | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS,
	}
	for {
		fd, err := unix.Openat2(root, rel, &how)
		if err != unix.EINTR {
			return fd, err
		}
	}
}
