//go:build linux

package mounter

import (
	"errors"
	"io"
	"os"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
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
	nlink, _, err := statFile(f, unix.STATX_NLINK)
	return err == nil && nlink > 0
}

// statFile returns f's link count and size, reading only what mask
// (STATX_NLINK, STATX_SIZE) asks for: never the file's timestamps.
//
// Why not fstat(2): it returns the timestamps, and since Linux 6.13
// (multigrain timestamps) a read of a file's ctime makes the kernel
// stamp the file's next change with a fine-grained time, which always
// differs from the last one, so the change dirties the inode. The store
// checks its file before each write, and the first write to a page of
// a new mapping is such a change: after an fstat it dirtied the inode
// at each agent start (and in each plugintest run), and on ext4 the
// next fsync of another file nearby (the plugin syncing its state) was
// about 1.5 times as slow (BenchmarkStore_NeighbourSync,
// fresh-neighbour-sync-vs-alone). Unasked, the kernel stamps the change
// with its coarse clock, which moves once per tick.
//
// Where statx(2) is refused (ENOSYS before Linux 4.11, or EPERM from a
// seccomp filter that predates it), fstat does the work.
func statFile(f *os.File, mask int) (nlink uint32, size int64, err error) {
	var sx unix.Statx_t
	err = statx(int(f.Fd()), "", unix.AT_EMPTY_PATH|unix.AT_STATX_SYNC_AS_STAT, mask, &sx)
	if err == nil {
		return sx.Nlink, int64(sx.Size), nil
	}
	if err != unix.ENOSYS && err != unix.EPERM {
		return 0, 0, &os.PathError{Op: "statx", Path: f.Name(), Err: err}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return 0, 0, &os.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	return uint32(st.Nlink), st.Size, nil
}

// openNoAtime opens the file at p with flag and O_NOATIME: neither a
// read nor a mapping of the file (mmap(2) counts as an access) then
// moves its access time, which under relatime would dirty the inode of
// a file written since its last access (see readFile). O_NOATIME needs
// the file's owner (or CAP_FOWNER); without it the file is opened
// without the flag.
func openNoAtime(p string, flag int) (*os.File, error) {
	f, err := os.OpenFile(p, flag|syscall.O_NOATIME, 0)
	if errors.Is(err, syscall.EPERM) {
		return os.OpenFile(p, flag, 0)
	}
	return f, err
}

// statx is unix.Statx; tests refuse it to exercise the fstat fallback.
var statx = unix.Statx

// readFile reads the file at p whole, as os.ReadFile does, without
// touching its inode: it does not read the timestamps (see statFile),
// and it opens the file with O_NOATIME (openNoAtime), where the read
// would otherwise move the access time of a file written since it was
// last read (relatime) and so dirty the inode, as the store's files are
// at each New.
func readFile(p string) ([]byte, error) {
	f, err := openNoAtime(p, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	_, size, err := statFile(f, unix.STATX_SIZE)
	if err != nil {
		return nil, err
	}
	// One byte more than the size, so that the read that fills the
	// buffer is followed by one that sees the end, as os.ReadFile does.
	data := make([]byte, 0, size+1)
	for {
		n, err := f.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if err == io.EOF {
			return data, nil
		}
		if err != nil {
			return nil, err
		}
		if len(data) == cap(data) {
			data = slices.Grow(data, 512)
		}
	}
}

// statDir reports whether p, symbolic links followed, is a directory,
// as os.Stat's IsDir does, without reading p's timestamps (see
// statFile).
func statDir(p string) (bool, error) {
	var sx unix.Statx_t
	err := statx(unix.AT_FDCWD, p, unix.AT_STATX_SYNC_AS_STAT, unix.STATX_TYPE, &sx)
	if err == unix.ENOSYS || err == unix.EPERM {
		fi, err := os.Stat(p)
		if err != nil {
			return false, err
		}
		return fi.IsDir(), nil
	}
	if err != nil {
		return false, &os.PathError{Op: "stat", Path: p, Err: err}
	}
	return sx.Mode&unix.S_IFMT == unix.S_IFDIR, nil
}
