//go:build !linux

package mounter

import "os"

// fdatasync flushes a file's data; without fdatasync(2) it is a full
// fsync.
func fdatasync(f *os.File) error { return f.Sync() }

// linked reports false where the link count cannot be read portably:
// the store then opens its file again for each write.
func linked(*os.File) bool { return false }

// readFile reads the file at p whole.
func readFile(p string) ([]byte, error) { return os.ReadFile(p) }

// statDir reports whether p, symbolic links followed, is a directory.
func statDir(p string) (bool, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return false, err
	}
	return fi.IsDir(), nil
}

// openNoAtime opens the file at p with flag.
func openNoAtime(p string, flag int) (*os.File, error) { return os.OpenFile(p, flag, 0) }
