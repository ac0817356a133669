package hostpath

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// usage is one VolumeUsage figure set.
type usage struct{ total, available, used int64 }

// CanBindMount reports whether this process can bind-mount a directory
// and remount it read-only, by trying it on two directories in a fresh
// temporary directory. It returns nil when it can, and otherwise the
// reason (typically "operation not permitted" for a non-root user, or for
// root in a container without CAP_SYS_ADMIN). MountAuto uses it; tests
// use it to skip bind-mount cases with the reason found at run time.
func CanBindMount() error {
	dir, err := os.MkdirTemp("", "hostpath-probe-")
	if err != nil {
		return fmt.Errorf("create probe directory: %w", err)
	}
	defer os.RemoveAll(dir)
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	for _, d := range []string{src, dst} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return fmt.Errorf("create probe directory: %w", err)
		}
	}
	if err := bindMount(src, dst, true); err != nil {
		return err
	}
	mounted, err := isMountPoint(dst)
	if uerr := unmount(dst); uerr != nil {
		return uerr
	}
	if err != nil {
		return fmt.Errorf("look up the probe mount in mountinfo: %w", err)
	}
	if !mounted {
		return errors.New("the probe bind mount succeeded but does not appear in /proc/self/mountinfo")
	}
	return nil
}

// failedPrecondition and internal build the two status codes most path
// problems map to.
func failedPrecondition(format string, args ...any) error {
	return status.Errorf(codes.FailedPrecondition, format, args...)
}

func internal(format string, args ...any) error {
	return status.Errorf(codes.Internal, format, args...)
}

// attach makes source appear at path with the given method, or confirms
// that it already does. path may be missing (it is created), an empty
// directory (the CO may create one; it is used for a bind mount and
// replaced for a symlink), or what an earlier attach of the same source
// left there. Anything else is refused with FailedPrecondition, so
// nothing the plugin did not create is ever hidden or removed.
func attach(method MountMethod, source, path string, readonly bool) error {
	fi, err := os.Lstat(path)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return internal("inspect %s: %v", path, err)
	}
	switch method {
	case MountSymlink:
		if exists {
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				if dest, err := os.Readlink(path); err == nil && dest == source {
					return nil
				}
				return failedPrecondition("%s is a symbolic link to something other than %s; remove it or use another path", path, source)
			case fi.IsDir():
				if err := removeEmptyDir(path); err != nil {
					return err
				}
			default:
				return failedPrecondition("%s exists and is not a directory; remove it or use another path", path)
			}
		}
		if err := os.Symlink(source, path); err != nil {
			return internal("link %s to %s: %v", path, source, err)
		}
		return nil
	case MountBind:
		if !exists {
			if err := os.Mkdir(path, 0o750); err != nil {
				return internal("create %s: %v", path, err)
			}
		} else {
			if !fi.IsDir() {
				return failedPrecondition("%s exists and is not a directory; remove it or use another path", path)
			}
			mounted, err := isMountPoint(path)
			if err != nil {
				return internal("look up %s in mountinfo: %v", path, err)
			}
			if mounted {
				if same, _ := sameFile(path, source); same {
					return nil // attached by an earlier call
				}
				return failedPrecondition("%s is already a mount point of something other than %s; unmount it or use another path", path, source)
			}
			if empty, err := isEmptyDir(path); err != nil {
				return internal("inspect %s: %v", path, err)
			} else if !empty {
				return failedPrecondition("%s is not empty; mounting over it would hide its files: empty it or use another path", path)
			}
		}
		if err := bindMount(source, path, readonly); err != nil {
			if !exists {
				_ = os.Remove(path)
			}
			return internal("%v", err)
		}
		return nil
	default:
		return internal("mount method %q is not resolved", method)
	}
}

// detach undoes attach at path. With trusted set (the plugin's records say
// it attached a volume there), whatever is at path is undone: a symbolic
// link is removed, a mount point unmounted. Without records only what is
// provably one of sources is undone: a link to one of them, or a mount
// point showing the same directory as one of them; anything else is left
// alone and detach succeeds, since the volume is not attached there.
//
// removeDir deletes the directory left after an unmount (a publish
// target, which the plugin created); restoreDir puts an empty directory
// back where a link was removed (a staging path, which the CO created).
func detach(path string, trusted bool, sources []string, removeDir, restoreDir bool) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return internal("inspect %s: %v", path, err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		if !trusted {
			dest, err := os.Readlink(path)
			if err != nil || !slices.Contains(sources, dest) {
				return nil
			}
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return internal("remove link %s: %v", path, err)
		}
		if restoreDir {
			if err := os.Mkdir(path, 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
				return internal("recreate directory %s: %v", path, err)
			}
		}
		return nil
	case fi.IsDir():
		mounted, err := isMountPoint(path)
		if err != nil {
			return internal("look up %s in mountinfo: %v", path, err)
		}
		if mounted {
			if !trusted && !sameAsAny(path, sources) {
				return nil
			}
			if err := unmount(path); err != nil {
				return internal("%v; if the volume is busy, stop what uses it and retry", err)
			}
		}
		if removeDir {
			if err := removeEmptyDir(path); err != nil {
				if !trusted && !mounted {
					return nil // a directory with files that the plugin never mounted: not ours
				}
				return err
			}
		}
		return nil
	default:
		return nil // a file or device: never created by the plugin
	}
}

func removeEmptyDir(path string) error {
	err := os.Remove(path)
	switch {
	case err == nil, errors.Is(err, fs.ErrNotExist):
		return nil
	case errors.Is(err, fs.ErrExist): // ENOTEMPTY or EEXIST, by platform
		return failedPrecondition("%s is a directory with files in it; empty it or use another path", path)
	default:
		return internal("remove %s: %v", path, err)
	}
}

func isEmptyDir(path string) (bool, error) {
	d, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer d.Close()
	_, err = d.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return false, err
}

func sameFile(a, b string) (bool, error) {
	fa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(fa, fb), nil
}

func sameAsAny(path string, sources []string) bool {
	for _, s := range sources {
		if same, _ := sameFile(path, s); same {
			return true
		}
	}
	return false
}
