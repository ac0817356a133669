//go:build !linux

package quietfs

import (
	"io/fs"
	"os"
)

// Stat returns f's size; the link count is not read portably and is
// reported as 1.
func Stat(f *os.File) (nlink uint64, size int64, err error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	return 1, fi.Size(), nil
}

// IsDir reports whether p, symbolic links followed, is a directory.
func IsDir(p string) (bool, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return false, err
	}
	return fi.IsDir(), nil
}

// Lexists returns nil if p exists (a link is not followed), and
// otherwise the error os.Lstat returns.
func Lexists(p string) error {
	_, err := os.Lstat(p)
	return err
}

// Open opens the file at p with flag.
func Open(p string, flag int) (*os.File, error) { return os.OpenFile(p, flag, 0) }

// ReadFile reads the file at p whole.
func ReadFile(p string) ([]byte, error) { return os.ReadFile(p) }

// ReadDir lists directory p sorted by name.
func ReadDir(p string) ([]fs.DirEntry, error) { return os.ReadDir(p) }
