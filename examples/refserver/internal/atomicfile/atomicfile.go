// Package atomicfile replaces a file atomically and durably, for the
// reference server's small files (a standalone server's state snapshot,
// a cluster server's ID).
package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
)

// Write replaces path with what write writes: into a temporary file in
// the same directory, synced, renamed over path, and the directory
// synced, so that a crash leaves the old content or the new one, never
// a torn file. The directory must exist. When writing, syncing or the
// rename fails, path is left as it was and the temporary file is
// removed; an error from syncing the directory comes after path was
// replaced, and means only that the replacement may not survive a crash.
func Write(path string, write func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if err := write(f); err != nil {
		return errors.Join(err, f.Close())
	}
	if err := f.Sync(); err != nil {
		return errors.Join(err, f.Close())
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// WriteBytes is Write for content already in memory.
func WriteBytes(path string, b []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}
