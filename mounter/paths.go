package mounter

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/internal/quietfs"
)

// Layout under Config.Root. Every element below the root is a validated
// ID (csi.ValidateID: no separator, no "." or "..", at most 128 bytes) or
// the String form of a StageUsage or Usage, so no request can name a path
// outside the root.
//
//	<root>/staging/<namespace>/<volume>/<stage usage>  NodeStageVolume's staging_target_path, e.g. .../snw-fs
//	<root>/per-alloc/<allocation>/<volume>/<usage>     NodePublishVolume's target_path, e.g. .../w-snw-fs
//
// A volume has one staging path per node at a time (see StageUsage); a
// file written by format version 1 may still name an older staging path
// (.../<usage>), which the tracker keeps using until it is unstaged.
const (
	stagingDir  = "staging"
	perAllocDir = "per-alloc"
)

// stagingPath is where (namespace, volume) is staged under stage usage s.
func (m *Mounter) stagingPath(namespace, volumeID string, s StageUsage) (string, error) {
	return m.underRoot(stagingDir, namespace, volumeID, s.String())
}

// targetPath is where (volume, usage) is published for an allocation.
// Allocation IDs are unique on the node, so the namespace is not needed.
func (m *Mounter) targetPath(allocID, volumeID string, u Usage) (string, error) {
	return m.underRoot(perAllocDir, allocID, volumeID, u.String())
}

// underRoot joins elements under the root and checks, as a second line of
// defence behind ID validation, that the result is a clean path strictly
// inside the root.
func (m *Mounter) underRoot(elems ...string) (string, error) {
	for _, e := range elems {
		if e == "" || e == "." || e == ".." || strings.ContainsAny(e, "/\\\x00") {
			return "", fmt.Errorf("%w: path element %q is not a plain name", csi.ErrInvalidRequest, e)
		}
	}
	p := filepath.Join(append([]string{m.root}, elems...)...)
	if !strings.HasPrefix(p, m.root+string(filepath.Separator)) {
		return "", fmt.Errorf("%w: path %q leaves the mount root %s", csi.ErrInvalidRequest, p, m.root)
	}
	return p, nil
}

// The CSI spec (v1.13, csi.proto) splits the creation of node paths
// between the CO and the plugin:
//
//   - NodeStageVolumeRequest.staging_target_path: "The CO SHALL ensure
//     that the path is directory and that the process serving the
//     request has `read` and `write` permission to that directory. The
//     CO SHALL be responsible for creating the directory if it does not
//     exist."
//   - NodePublishVolumeRequest.target_path: "The CO SHALL ensure that the
//     parent directory of this path exists and that the process serving
//     the request has `read` and `write` permissions to that parent
//     directory. […] Creation of target_path is the responsibility of
//     the SP."
//   - NodeUnpublishVolumeRequest.target_path: "The SP MUST delete the file
//     or directory it created at this path."
//
// So the mounter creates the staging directory itself but only the
// parent of a target, and after a teardown removes only directories it
// created, and only when they are empty (os.Remove, never RemoveAll: a
// path under the root may still hold a mount).

// makeStagingDir creates the staging directory and its parents.
func (m *Mounter) makeStagingDir(p string) error {
	m.dirMu.Lock()
	defer m.dirMu.Unlock()
	return mkdirBelow(filepath.Join(m.root, stagingDir), p)
}

// alongside runs dirs, directory work under the mount root, while call
// makes a plugin call that does not depend on it, and returns once both
// are done: dirs's error and call's. On a busy ext4 a mkdir or rmdir can
// take as long as a plugin call (without a journal, allocating an inode
// skips every one freed in the last minutes, and freeing a directory's
// block waits for its discard), so a first mount creates the target's
// parent while the plugin stages, and a last unmount removes it while
// the plugin unstages. The two never touch the same paths.
func alongside(dirs, call func() error) (dirsErr, callErr error) {
	done := make(chan error, 1)
	go func() { done <- dirs() }()
	callErr = call()
	return <-done, callErr
}

// makeTargetParent creates the parent directories of a target path.
func (m *Mounter) makeTargetParent(target string) error {
	m.dirMu.Lock()
	defer m.dirMu.Unlock()
	return mkdirBelow(filepath.Join(m.root, perAllocDir), filepath.Dir(target))
}

// mkdirBelow creates directory p and its missing parents below base, as
// os.MkdirAll does, in fewer system calls for the mounter's layout: an
// existing p costs one stat, as with MkdirAll, and a missing one is
// created from the top down, one mkdir per level, where MkdirAll stats
// every missing level first. base is normally there (New creates it);
// if it is not, or p is not below it, os.MkdirAll does the work. The
// stats leave the timestamps unread (quietfs.IsDir).
func mkdirBelow(base, p string) error {
	dir, err := quietfs.IsDir(p)
	if err == nil {
		if dir {
			return nil
		}
		return &fs.PathError{Op: "mkdir", Path: p, Err: syscall.ENOTDIR}
	}
	rel, err := filepath.Rel(base, p)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return os.MkdirAll(p, 0o750)
	}
	d := base
	for e := range strings.SplitSeq(rel, string(filepath.Separator)) {
		d = filepath.Join(d, e)
		err := os.Mkdir(d, 0o750)
		switch {
		case err == nil:
		case errors.Is(err, fs.ErrNotExist):
			// base itself is gone.
			return os.MkdirAll(p, 0o750)
		case errors.Is(err, fs.ErrExist):
			// A parent made by another mount, or p made since the stat.
			// Something that is not a directory fails the next mkdir
			// (ENOTDIR) or, for p itself, this check.
			if d == p {
				if dir, serr := quietfs.IsDir(p); serr != nil || !dir {
					return err
				}
			}
		default:
			return err
		}
	}
	return nil
}

// ensureDir creates directory p with perm, and its parents if need be,
// and takes an existing directory as it is, as os.MkdirAll does; but it
// tries mkdir first and checks an existing p with quietfs.IsDir, where
// MkdirAll stats p first and reads its timestamps. Such a read makes
// p's next change take a fine-grained time (Linux 6.13 and later; see
// quietfs), and the mounter's directories change at each mount: the
// first mount after New would dirty their inodes, which slows the
// plugin's next fsync on ext4 (in plugintest, which builds a Mounter
// per run, at every run).
func ensureDir(p string, perm fs.FileMode) error {
	err := os.Mkdir(p, perm)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrExist):
		dir, serr := quietfs.IsDir(p)
		switch {
		case serr != nil:
			return err
		case !dir:
			return &fs.PathError{Op: "mkdir", Path: p, Err: syscall.ENOTDIR}
		}
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return os.MkdirAll(p, perm)
	}
	return err
}

// removeEmpty removes p and then its parents while they are empty,
// stopping below stop (the staging or per-alloc directory). Errors are
// logged, not returned: a leftover empty directory harms nothing, and a
// non-empty one must stay.
func (m *Mounter) removeEmpty(p, stop string) {
	m.dirMu.Lock()
	defer m.dirMu.Unlock()
	for p != stop && strings.HasPrefix(p, stop+string(filepath.Separator)) {
		if err := removeDir(p); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				if !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
					m.logger.Warn("cannot remove directory under the mount root", "path", p, "error", err)
				}
				return
			}
		}
		p = filepath.Dir(p)
	}
}

// removeDir removes p as os.Remove does, trying rmdir first: p is
// nearly always a directory, where os.Remove spends a failed unlink
// before its rmdir.
func removeDir(p string) error {
	err := syscall.Rmdir(p)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ENOTDIR):
		return os.Remove(p)
	case errors.Is(err, syscall.EINTR):
		return os.Remove(p)
	}
	return &fs.PathError{Op: "remove", Path: p, Err: err}
}
