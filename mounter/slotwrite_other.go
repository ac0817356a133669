//go:build !linux

package mounter

import "os"

// writeAt writes b at offset off of f's file, open as fd.
func (f *stateFile) writeAt(fd *os.File, b []byte, off int) error {
	_, err := fd.WriteAt(b, int64(off))
	return err
}

// unmap does nothing: only Linux writes through a mapping.
func (f *stateFile) unmap() {}
