//go:build linux

package quietfs

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// statx is unix.Statx; tests refuse it to exercise the fallbacks.
var statx = unix.Statx

// fallBack reports whether a statx error means "use the stat family":
// statx refused (ENOSYS, EPERM) or partial (errPartial).
func fallBack(err error) bool { return err == unix.ENOSYS || err == unix.EPERM || err == errPartial }

// errPartial stands for a statx that succeeded without filling in
// everything asked (a file system may leave out what it cannot
// provide): the stat family fills it in.
var errPartial = errors.New("statx left out a field asked for")

// statxAll is statx, with errPartial when sx lacks a field of mask.
func statxAll(dirfd int, path string, flags, mask int, sx *unix.Statx_t) error {
	if err := statx(dirfd, path, flags, mask, sx); err != nil {
		return err
	}
	if sx.Mask&uint32(mask) != uint32(mask) {
		return errPartial
	}
	return nil
}

// Stat returns f's link count and size, as fstat(2) would, without
// reading its timestamps.
func Stat(f *os.File) (nlink uint64, size int64, err error) {
	var sx unix.Statx_t
	err = statxAll(int(f.Fd()), "", unix.AT_EMPTY_PATH|unix.AT_STATX_SYNC_AS_STAT, unix.STATX_NLINK|unix.STATX_SIZE, &sx)
	if err == nil {
		return uint64(sx.Nlink), int64(sx.Size), nil
	}
	if !fallBack(err) {
		return 0, 0, &os.PathError{Op: "statx", Path: f.Name(), Err: err}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return 0, 0, &os.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	return uint64(st.Nlink), st.Size, nil
}

// IsDir reports whether p, symbolic links followed, is a directory, as
// os.Stat's IsDir does, without reading its timestamps.
func IsDir(p string) (bool, error) {
	var sx unix.Statx_t
	err := statxAll(unix.AT_FDCWD, p, unix.AT_STATX_SYNC_AS_STAT, unix.STATX_TYPE, &sx)
	if fallBack(err) {
		fi, err := os.Stat(p)
		if err != nil {
			return false, err
		}
		return fi.IsDir(), nil
	}
	if err != nil {
		return false, &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	return sx.Mode&unix.S_IFMT == unix.S_IFDIR, nil
}

// Lexists returns nil if p exists (a link is not followed), and
// otherwise the error os.Lstat returns, without reading p's timestamps.
func Lexists(p string) error {
	var sx unix.Statx_t
	err := statxAll(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_SYNC_AS_STAT, unix.STATX_TYPE, &sx)
	if fallBack(err) {
		_, err := os.Lstat(p)
		return err
	}
	if err != nil {
		return &fs.PathError{Op: "lstat", Path: p, Err: err}
	}
	return nil
}

// Open opens the file at p with flag (no O_CREATE: the file exists) and
// O_NOATIME, so that neither a read nor a mapping of it (mmap(2) counts
// as an access) moves its access time.
func Open(p string, flag int) (*os.File, error) {
	f, err := os.OpenFile(p, flag|syscall.O_NOATIME, 0)
	if errors.Is(err, syscall.EPERM) {
		return os.OpenFile(p, flag, 0)
	}
	return f, err
}

// ReadFile reads the file at p whole, as os.ReadFile does, through Open
// and Stat.
func ReadFile(p string) ([]byte, error) {
	f, err := Open(p, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	_, size, err := Stat(f)
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

// ReadDir lists directory p sorted by name, as os.ReadDir does, with p
// opened O_NOATIME.
func ReadDir(p string) ([]fs.DirEntry, error) {
	f, err := Open(p, os.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, err
}
