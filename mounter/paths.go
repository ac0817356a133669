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
// created, and only when they are empty (rmdir, never RemoveAll: a path
// under the root may still hold a mount). It reaches all of them
// through m.tree, which follows no link beneath the root, and checks a
// path before handing it to the plugin (refuseLinks).
//
// Two elements are the plugin's rather than the mounter's: the staging
// directory once NodeStageVolume may have run, and the target from the
// first NodePublishVolume on. A plugin mounts on them, and may make
// them links of its own (the hostpath example's symlink mode does, where
// it cannot mount), so they are held to the rule only until then: a
// link at either before the plugin was asked to use it was planted.

// makeStagingDir creates the staging directory and its parents. fresh
// says that no stage may have been made there (the directory is still
// the mounter's): a link there is then refused, and otherwise left to
// the plugin.
func (m *Mounter) makeStagingDir(p string, fresh bool) error {
	m.dirMu.Lock()
	defer m.dirMu.Unlock()
	return m.tree.mkdirAll(p, !fresh)
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
	return m.tree.mkdirAll(filepath.Dir(target), false)
}

// refuseLinks refuses (*UnsafePathError) a staging or target path that
// passes through a symbolic link beneath the root before it goes to
// the plugin: a plugin follows links, so it would mount, unmount or
// delete wherever the link points. leaf says that p itself is still the
// mounter's (see above) and must not be a link either. What is not made
// yet passes; its directories are checked as the mounter makes them.
func (m *Mounter) refuseLinks(p string, leaf bool) error {
	if !leaf {
		p = filepath.Dir(p)
	}
	return m.tree.check(p)
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
// stopping below <root>/<stop> (the staging or per-alloc directory),
// never through a link (tree.removeEmpty). Errors are logged, not
// returned: a leftover empty directory harms nothing, and a non-empty
// one, or a link, must stay.
func (m *Mounter) removeEmpty(p, stop string) {
	m.dirMu.Lock()
	defer m.dirMu.Unlock()
	if at, err := m.tree.removeEmpty(p, stop); err != nil {
		m.logger.Warn("cannot remove directory under the mount root", "path", at, "error", err)
	}
}
