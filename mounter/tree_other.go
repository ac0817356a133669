//go:build !unix

package mounter

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// Without openat(2) the elements are checked by path with os.Lstat, one
// at a time: that refuses a link that is there, but a link made between
// the check and the use would be followed. CSI node plugins run on Unix
// systems; this keeps the package building elsewhere.

func (t *tree) mkdirElems(elems []string, leafAnyKind bool) error {
	for i := range elems {
		p := t.path(elems[:i+1])
		err := os.Mkdir(p, 0o750)
		if i == 0 && errors.Is(err, fs.ErrNotExist) {
			// The root is gone: made again, as New made it.
			if err = os.MkdirAll(t.root, 0o750); err == nil {
				err = os.Mkdir(p, 0o750)
			}
		}
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if leafAnyKind && i == len(elems)-1 {
			return nil
		}
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			return t.linkError(elems[:i+1])
		case !fi.IsDir():
			return t.elemError("mkdir", elems[:i+1], syscall.ENOTDIR)
		}
	}
	return nil
}

func (t *tree) checkElems(elems []string) error {
	for i := range elems {
		fi, err := os.Lstat(t.path(elems[:i+1]))
		switch {
		case err != nil:
			// Missing, or below a file: no link on the way.
			return nil
		case fi.Mode()&fs.ModeSymlink != 0:
			return t.linkError(elems[:i+1])
		}
	}
	return nil
}

func (t *tree) removeElems(elems []string) error {
	if err := t.checkElems(elems); err != nil {
		return err
	}
	return os.Remove(t.path(elems))
}
