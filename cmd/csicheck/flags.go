package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/plugintest"
)

// options are the flags that shape csicheck's output, not the checks.
type options struct {
	json, verbose bool
	junit         string // --junit FILE
}

// flags are csicheck's flags as parsed: the settings that go straight
// into the Config, and the text of those that must be read first.
type flags struct {
	cfg  plugintest.Config
	opts options

	access, attach, fsType, data, logLevel, secrets string
	size, paramsFile, restartCmd                    string
	createCmd, removeCmd, checkCmd                  string
	mountFlags                                      []string
	params, volCtx, mutable                         pairs
}

// parse turns the command line into a plugintest.Config: it defines the
// flags, parses them, and reads each setting that is not a plain value,
// stopping at the first that does not read.
func parse(args []string, stderr io.Writer) (plugintest.Config, options, error) {
	f := &flags{
		access:   csi.AccessModeSingleNodeWriter.String(),
		attach:   csi.AttachmentModeFileSystem.String(),
		data:     plugintest.DataShared.String(),
		logLevel: "off",
		params:   pairs{},
		mutable:  pairs{},
		volCtx:   pairs{},
	}
	fs := f.define(stderr)
	if err := fs.Parse(args); err != nil {
		return f.cfg, f.opts, err
	}
	if fs.NArg() > 0 {
		return f.cfg, f.opts, fmt.Errorf("unexpected arguments %q; every setting is a flag (see --help)", fs.Args())
	}
	f.setOptional()
	f.cfg.SettingNames = settingNames
	if f.restartCmd != "" {
		f.cfg.RestartPlugin = restartCommand(f.restartCmd, stderr)
	}
	f.setPathCommands(stderr)
	readLogLevel := func() error { return f.readLogLevel(stderr) }
	for _, read := range []func() error{f.readModes, f.readDirs, f.readDataCheck, f.readSecrets, f.readTestVolume, readLogLevel} {
		if err := read(); err != nil {
			return f.cfg, f.opts, err
		}
	}
	return f.cfg, f.opts, nil
}

// define makes the flag set, every flag bound to a field of f.
func (f *flags) define(stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("csicheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: csicheck --endpoint unix:///path/csi.sock [--volume-id ID] [--json] [flags]")
		fs.PrintDefaults()
	}
	cfg := &f.cfg
	fs.StringVar(&cfg.Endpoint, "endpoint", "", "the plugin's unix socket (/path or unix:///path)")
	fs.StringVar(&cfg.ControllerEndpoint, "controller-endpoint", "", "a split plugin's controller socket")
	fs.StringVar(&cfg.NodeEndpoint, "node-endpoint", "", "a split plugin's node socket")
	fs.StringVar(&cfg.SecondNodeEndpoint, "second-node-endpoint", "", "the plugin's node socket on a second node: the volume is handed over to it after the release")
	fs.StringVar(&cfg.VolumeID, "volume-id", "", "the plugin's ID of a pre-provisioned volume to use instead of creating one")
	fs.Var(f.volCtx, "volume-context", "key=value of the pre-provisioned volume's context (repeatable)")
	fs.StringVar(&f.access, "access-mode", f.access, "access mode of the volume and its claims")
	fs.StringVar(&f.attach, "attachment-mode", f.attach, "file-system or block-device")
	fs.StringVar(&f.fsType, "fs-type", "", "file system type for a file-system attachment")
	fs.Func("mount-flag", "mount flag for a file-system attachment (repeatable)", func(s string) error {
		f.mountFlags = append(f.mountFlags, s)
		return nil
	})
	fs.Var(f.params, "parameter", "key=value passed to CreateVolume (repeatable)")
	fs.Var(f.mutable, "mutable-parameter", "key=value the \"modify volume\" step sets with ControllerModifyVolume (repeatable; none skips the step)")
	fs.Int64Var(&cfg.CapacityBytes, "capacity", 0, "CreateVolume's required capacity in bytes (0: none)")
	fs.StringVar(&f.secrets, "secrets-file", "", "YAML or JSON file of secrets passed to every call that takes them; csi-sanity's per-call form (CreateVolumeSecret: {...}) too, but csikit keeps one set per volume, so a key may not take different values in different calls (the snapshot calls' sets excepted)")
	fs.StringVar(&f.size, "test-volume-size", "", "CreateVolume's required capacity, such as 1Gi (as --capacity)")
	fs.StringVar(&f.paramsFile, "test-volume-parameters", "", "YAML or JSON file of CreateVolume parameters (merged under --parameter)")
	fs.StringVar(&cfg.RunChecks, "run", "", "regular expression: run only the coverage checks whose names match")
	fs.StringVar(&cfg.SkipChecks, "skip", "", "regular expression: skip the coverage checks whose names match")
	fs.StringVar(&f.opts.junit, "junit", "", "also write the results as JUnit XML to this file")
	fs.BoolVar(&cfg.Faults, "faults", false, "restart csicheck's own node agent mid-lifecycle and cancel then retry the publish and stage calls")
	fs.StringVar(&f.restartCmd, "restart-cmd", "", "shell command that restarts the plugin; run after the first mount, then the plugin must still know its publications")
	fs.StringVar(&cfg.MountRoot, "mount-root", "", "directory to stage and publish under (default: a temporary directory)")
	fs.StringVar(&cfg.StagingDir, "staging-dir", "", "directory for the staging paths instead of --mount-root (csi-sanity's --csi.stagingdir)")
	fs.StringVar(&cfg.TargetDir, "target-dir", "", "directory for the target paths instead of --mount-root (csi-sanity's --csi.mountdir)")
	fs.StringVar(&f.createCmd, "create-path-cmd", "", "command run with a directory as its last argument to create it where the plugin sees it (another mount namespace or container)")
	fs.StringVar(&f.removeCmd, "remove-path-cmd", "", "command run with a path as its last argument to remove it where the plugin sees it")
	fs.StringVar(&f.checkCmd, "check-path-cmd", "", "command run with a path as its last argument that prints file, directory, not_found or other for it, where the plugin sees it")
	fs.StringVar(&cfg.StateDir, "state-dir", "", "directory for the mounter's state (default: a temporary directory)")
	fs.DurationVar(&cfg.Timeout, "timeout", plugintest.DefaultTimeout, "bound on each step")
	fs.StringVar(&f.data, "data-check", f.data, "shared, writer-only or off")
	fs.BoolVar(&cfg.SkipIdempotency, "skip-idempotency", false, "do not repeat the mutating calls")
	fs.BoolVar(&cfg.SkipNegative, "skip-negative", false, "do not send the requests the plugin must refuse")
	fs.BoolVar(&cfg.StrictUnstage, "strict-unstage", false, "require NodeUnstageVolume to be refused while the volume is published")
	fs.BoolVar(&f.opts.json, "json", false, "print the results as JSON")
	fs.BoolVar(&f.opts.verbose, "verbose", false, "print each step to stderr as it starts")
	fs.StringVar(&f.logLevel, "log-level", f.logLevel, "csikit's logs on stderr: off, error, warn, info, debug or trace")
	return fs
}

// settingNames are the flags that set each plugintest.Config field, so
// that plugintest's messages name the flag to change.
var settingNames = map[string]string{
	"Endpoint":           "--endpoint",
	"ControllerEndpoint": "--controller-endpoint",
	"NodeEndpoint":       "--node-endpoint",
	"SecondNodeEndpoint": "--second-node-endpoint",
	"VolumeID":           "--volume-id",
	"VolumeContext":      "--volume-context",
	"Capability":         "--access-mode/--attachment-mode",
	"MountOptions":       "--fs-type/--mount-flag",
	"Parameters":         "--parameter",
	"MutableParameters":  "--mutable-parameter",
	"Secrets":            "--secrets-file",
	"CallSecrets":        "--secrets-file",
	"CapacityBytes":      "--capacity/--test-volume-size",
	"RunChecks":          "--run",
	"SkipChecks":         "--skip",
	"MountRoot":          "--mount-root",
	"StateDir":           "--state-dir",
	"StagingDir":         "--staging-dir",
	"TargetDir":          "--target-dir",
	"Timeout":            "--timeout",
	"SkipIdempotency":    "--skip-idempotency",
	"SkipNegative":       "--skip-negative",
	"StrictUnstage":      "--strict-unstage",
	"DataCheck":          "--data-check",
	"Faults":             "--faults",
	"RestartPlugin":      "--restart-cmd",
	"CreatePath":         "--create-path-cmd",
	"RemovePath":         "--remove-path-cmd",
	"CheckPath":          "--check-path-cmd",
}

// restartCommand runs cmd with sh -c, its output on stderr.
func restartCommand(cmd string, stderr io.Writer) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		c := exec.CommandContext(ctx, "sh", "-c", cmd)
		c.Stdout, c.Stderr = stderr, stderr
		if err := c.Run(); err != nil {
			return fmt.Errorf("--restart-cmd %q: %w", cmd, err)
		}
		return nil
	}
}

// readModes reads --access-mode and --attachment-mode.
func (f *flags) readModes() error {
	var err error
	if f.cfg.Capability.AccessMode, err = csi.ParseAccessMode(f.access); err != nil {
		return fmt.Errorf("--access-mode: %w", err)
	}
	if f.cfg.Capability.AttachmentMode, err = csi.ParseAttachmentMode(f.attach); err != nil {
		return fmt.Errorf("--attachment-mode: %w", err)
	}
	return nil
}

// setOptional sets the mount options, parameters and volume context,
// leaving each nil when no flag gave it.
func (f *flags) setOptional() {
	if f.fsType != "" || len(f.mountFlags) > 0 {
		f.cfg.MountOptions = &csi.MountOptions{FSType: f.fsType, MountFlags: f.mountFlags}
	}
	if len(f.params) > 0 {
		f.cfg.Parameters = f.params
	}
	if len(f.volCtx) > 0 {
		f.cfg.VolumeContext = f.volCtx
	}
	if len(f.mutable) > 0 {
		f.cfg.MutableParameters = f.mutable
	}
}

// readDirs makes --mount-root and --state-dir absolute.
func (f *flags) readDirs() error {
	for _, d := range []struct {
		flag string
		path *string
	}{{"--mount-root", &f.cfg.MountRoot}, {"--state-dir", &f.cfg.StateDir}, {"--staging-dir", &f.cfg.StagingDir}, {"--target-dir", &f.cfg.TargetDir}} {
		if *d.path == "" {
			continue
		}
		abs, err := filepath.Abs(*d.path)
		if err != nil {
			return fmt.Errorf("%s %q: %w; give an absolute path", d.flag, *d.path, err)
		}
		*d.path = abs
	}
	return nil
}

// readDataCheck reads --data-check.
func (f *flags) readDataCheck() error {
	var err error
	if f.cfg.DataCheck, err = plugintest.ParseDataCheck(f.data); err != nil {
		return fmt.Errorf("--data-check: %w", err)
	}
	return nil
}

// readSecrets reads the --secrets-file, if one was given.
func (f *flags) readSecrets() error {
	if f.secrets == "" {
		return nil
	}
	var err error
	f.cfg.Secrets, f.cfg.CallSecrets, err = readSecretsFile(f.secrets)
	return err
}

// readTestVolume reads --test-volume-size and --test-volume-parameters.
func (f *flags) readTestVolume() error {
	if f.size != "" {
		n, err := parseSize(f.size)
		if err != nil {
			return fmt.Errorf("--test-volume-size: %w", err)
		}
		f.cfg.CapacityBytes = n
	}
	if f.paramsFile == "" {
		return nil
	}
	p, err := readParametersFile(f.paramsFile)
	if err != nil {
		return err
	}
	for k, v := range f.cfg.Parameters {
		p[k] = v // --parameter wins
	}
	if len(p) > 0 {
		f.cfg.Parameters = p
	}
	return nil
}

// readLogLevel gives the Config a logger on stderr unless --log-level
// is off.
func (f *flags) readLogLevel(stderr io.Writer) error {
	if f.logLevel == "off" {
		return nil
	}
	lvl := hclog.LevelFromString(f.logLevel)
	if lvl == hclog.NoLevel {
		return fmt.Errorf("--log-level %q: use off, error, warn, info, debug or trace", f.logLevel)
	}
	f.cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "csicheck", Level: lvl, Output: stderr})
	return nil
}

// pairs is a repeatable key=value flag.
type pairs map[string]string

func (p pairs) String() string { return fmt.Sprint(map[string]string(p)) }

func (p pairs) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not key=value", s)
	}
	p[k] = v
	return nil
}
