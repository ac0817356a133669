//go:build !linux

package mounter

import "os"

// fdatasync flushes a file's data; without fdatasync(2) it is a full
// fsync.
func fdatasync(f *os.File) error { return f.Sync() }

// linked reports false where the link count cannot be read portably:
// the store then opens its file again for each write.
func linked(*os.File) bool { return false }
