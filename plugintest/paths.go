package plugintest

import (
	"cmp"
	"fmt"
	"path/filepath"
	"strings"
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
