package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the refserver module's version as the build recorded it
// ("(devel)" for a build from a checkout), with the VCS revision when
// the build knows it.
func Version() string {
	v := "(devel)"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if bi.Main.Version != "" {
		v = bi.Main.Version
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+modified"
			}
		}
	}
	if rev != "" {
		v += " " + rev[:min(12, len(rev))] + modified
	}
	return v
}

func (e *env) version(args []string) int {
	fs := e.modeFlags("version", "Prints refserver's version, its VCS revision when the build recorded one, and the Go version.", "refserver version")
	code := ExitOK
	if !e.parseMode(fs, args, &code) {
		return code
	}
	fmt.Fprintf(e.stdout, "refserver %s (csikit, %s)\n", Version(), runtime.Version())
	return ExitOK
}
