package plugintest

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
)

// roots are the directories the run stages and publishes under: the
// mount root, and the staging and target directories when they are set
// apart from it.
func (l *run) roots() []string {
	out := []string{l.cfg.MountRoot}
	for _, d := range []string{l.cfg.StagingDir, l.cfg.TargetDir} {
		if d != "" && d != out[len(out)-1] && d != out[0] {
			out = append(out, d)
		}
	}
	return out
}

// checkDirs refuses a staging and a target directory (each MountRoot
// when unset) of which one lies inside the other: the mounter's
// teardown of one would walk the other's directories.
func (c Config) checkDirs() error {
	s, t := cmp.Or(c.StagingDir, c.MountRoot), cmp.Or(c.TargetDir, c.MountRoot)
	if s == "" || t == "" {
		return nil
	}
	s, t = filepath.Clean(s), filepath.Clean(t)
	sep := string(filepath.Separator)
	if s != t && (strings.HasPrefix(s, t+sep) || strings.HasPrefix(t, s+sep)) {
		return fmt.Errorf("Config.StagingDir %q and Config.TargetDir %q (each Config.MountRoot when unset) nest; use the same directory or two apart", s, t)
	}
	return nil
}

// PathKind is what Config.CheckPath finds at a path.
type PathKind int

// The kinds, named as csi-sanity's check-path command prints them.
const (
	PathNotFound PathKind = iota
	PathFile
	PathDirectory
	PathOther
)

var pathKindNames = []string{"not_found", "file", "directory", "other"}

func (k PathKind) String() string {
	if k < 0 || int(k) >= len(pathKindNames) {
		return fmt.Sprintf("PathKind(%d)", int(k))
	}
	return pathKindNames[k]
}

// ParsePathKind parses the String form of a PathKind: not_found, file,
// directory or other.
func ParsePathKind(s string) (PathKind, error) {
	for i, n := range pathKindNames {
		if n == s {
			return PathKind(i), nil
		}
	}
	return PathOther, fmt.Errorf("%w: %q is not a path kind; want not_found, file, directory or other", csi.ErrInvalidRequest, s)
}

// madePaths runs Config.CreatePath for every directory the plugin is
// given or looks beneath: the roots, the probes' directory, the second
// node's roots, and, as the stack sends them, each staging_target_path
// and the parent of each target_path (the spec has the CO make those;
// the mounter makes them on the host). It remembers each path once, in
// order, for remove. Safe for concurrent use: the mounter's calls and
// the harness's steps may run on different goroutines.
type madePaths struct {
	create  func(ctx context.Context, path string) error // nil: nothing to do
	timeout time.Duration
	rename  func(error) error // Config.renameErr

	mu   sync.Mutex
	list []string
	seen map[string]bool
}

// make creates p through Config.CreatePath, unless it did already.
func (m *madePaths) make(ctx context.Context, p string) error {
	if m == nil || m.create == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen[p] {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	if err := m.create(ctx, p); err != nil {
		return m.rename(fmt.Errorf("plugintest: Config.CreatePath could not create %s: %w", p, err))
	}
	if m.seen == nil {
		m.seen = map[string]bool{}
	}
	m.seen[p] = true
	m.list = append(m.list, p)
	return nil
}

// made returns the paths made so far, in order.
func (m *madePaths) made() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.list)
}

// createRoots runs Config.CreatePath for each root, so that the
// directories exist where the plugin looks (another mount namespace).
func (l *run) createRoots(ctx context.Context) error {
	for _, r := range l.roots() {
		if err := l.made.make(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// removeMade runs Config.RemovePath for every path madePaths made, the
// last made first, so that a path goes before the directory it is in;
// a failure is logged, as the run's results stand. A path with
// something the run left behind at or beneath it (a mount a failed
// cleanup left, see leftovers) is kept and logged: a remove command
// that deletes recursively would delete the volume's data through it.
func (l *run) removeMade(ctx context.Context) {
	if l.cfg.RemovePath == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.Timeout)
	defer cancel()
	var left []string
	for _, root := range l.roots() {
		for _, rel := range l.leftoversUnder(root, l.givenPaths(), false) {
			left = append(left, filepath.Join(root, rel))
		}
	}
	paths := l.made.made()
	for i := len(paths) - 1; i >= 0; i-- {
		if k := slices.IndexFunc(left, func(p string) bool { return within(p, paths[i]) }); k >= 0 {
			l.rep.Logf("%s", l.cfg.rename(fmt.Sprintf("kept %s, not given to Config.RemovePath: the run left %s there", paths[i], left[k])))
			continue
		}
		if err := l.cfg.RemovePath(ctx, paths[i]); err != nil {
			l.rep.Logf("%s", l.cfg.rename(fmt.Sprintf("Config.RemovePath %s: %v", paths[i], err)))
		}
	}
}

// within reports whether p is dir or lies beneath it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// pathsLeft asks Config.CheckPath about every target_path and
// staging_target_path the plugin was given (the probes' aside), which
// it must have removed, or let the mounter remove, by now; it returns
// those still there, or that the command could not check.
func (l *run) pathsLeft(ctx context.Context) []string {
	if l.cfg.CheckPath == nil {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, c := range l.calls.all() {
		var p string
		switch r := c.Req.(type) {
		case *plugin.NodePublishRequest:
			p = r.TargetPath
		case *plugin.NodeStageRequest:
			p = r.StagingPath
		}
		if p == "" || seen[p] || (l.probeDir != "" && strings.HasPrefix(p, l.probeDir+string(filepath.Separator))) {
			continue
		}
		seen[p] = true
		switch kind, err := l.cfg.CheckPath(ctx, p); {
		case err != nil:
			out = append(out, fmt.Sprintf("%s (Config.CheckPath: %v)", p, err))
		case kind != PathNotFound:
			out = append(out, fmt.Sprintf("%s (%s, says Config.CheckPath)", p, kind))
		}
	}
	return out
}
