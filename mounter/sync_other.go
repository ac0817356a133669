//go:build !linux

package mounter

import "os"

// fdatasync flushes a file's data; without fdatasync(2) it is a full
// fsync.
func fdatasync(f *os.File) error { return f.Sync() }
