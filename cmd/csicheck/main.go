// Command csicheck drives a CSI plugin through the orchestrator's
// lifecycle with the csikit stack and prints a pass/fail table: the
// checks of package plugintest (results, idempotency, the refusals the
// spec mandates, the order of calls, cleanup), from the command line.
//
// Start the plugin on a unix socket on this host, then:
//
//	csicheck --endpoint unix:///run/csi/csi.sock
//	csicheck --endpoint /run/csi/csi.sock --volume-id disk-42     # node-only plugin
//	csicheck --controller-endpoint /run/ctrl.sock --node-endpoint /run/node.sock
//
// csicheck stages and publishes under a temporary mount root (or
// --mount-root) and reads and writes the published volume, so run it
// where the plugin's mounts are visible, with the rights the plugin's
// node service needs (often root).
//
// Flags:
//
//	--endpoint                the plugin's socket (monolith or node-only)
//	--controller-endpoint     a split plugin's controller socket
//	--node-endpoint           a split plugin's node socket
//	--volume-id               a pre-provisioned volume (required when the plugin cannot create volumes)
//	--volume-context k=v      its volume context (repeatable)
//	--access-mode             default single-node-writer
//	--attachment-mode         file-system (default) or block-device
//	--fs-type, --mount-flag   mount options (--mount-flag repeatable)
//	--parameter k=v           CreateVolume parameters (repeatable)
//	--capacity                CreateVolume's required bytes
//	--secrets-file            a JSON object of secrets, passed to every call that takes them
//	--mount-root, --state-dir where to stage and publish, and the mounter's state
//	--timeout                 bound on each step (default 1m)
//	--data-check              shared (default), writer-only or off
//	--skip-idempotency        do not repeat the mutating calls
//	--skip-negative           do not send requests the plugin must refuse
//	--strict-unstage          require NodeUnstageVolume to be refused while published
//	--json                    print the results as JSON instead of a table
//	--verbose                 print each step to stderr as it starts
//	--log-level               csikit's logs on stderr: off (default), error, warn, info, debug, trace
//
// Secrets are read from a file, never from the command line, and never
// printed. Interrupting csicheck (SIGINT, SIGTERM) ends the current step;
// the cleanups still run.
//
// Exit status: 0 when every check passed, 1 when one failed, 2 when
// csicheck could not run (bad flags, an unusable mount root).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/plugintest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitPass  = 0
	exitFail  = 1
	exitUsage = 2
)

// run is the command: it parses args, runs the checks and prints the
// results to stdout; usage errors and progress go to stderr. It returns
// the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, opts, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitPass
	}
	if err != nil {
		fmt.Fprintf(stderr, "csicheck: %v\n", err)
		return exitUsage
	}
	t := &table{Recorder: &plugintest.Recorder{}}
	if opts.verbose {
		t.progress = stderr
	}
	if err := plugintest.Check(ctx, cfg, t); err != nil {
		fmt.Fprintf(stderr, "csicheck: %v\n", err)
		return exitUsage
	}
	if opts.json {
		err = t.writeJSON(stdout)
	} else {
		err = t.writeText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "csicheck: write the results: %v\n", err)
		return exitUsage
	}
	if t.Failed() {
		return exitFail
	}
	return exitPass
}

type options struct {
	json, verbose bool
}

// parse turns the command line into a plugintest.Config.
func parse(args []string, stderr io.Writer) (plugintest.Config, options, error) {
	var (
		cfg      plugintest.Config
		opts     options
		access   = csi.AccessModeSingleNodeWriter.String()
		attach   = csi.AttachmentModeFileSystem.String()
		fsType   string
		flags    []string
		params   = pairs{}
		volCtx   = pairs{}
		secrets  string
		data     = plugintest.DataShared.String()
		logLevel = "off"
	)
	fs := flag.NewFlagSet("csicheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: csicheck --endpoint unix:///path/csi.sock [--volume-id ID] [--json] [flags]")
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.Endpoint, "endpoint", "", "the plugin's unix socket (/path or unix:///path)")
	fs.StringVar(&cfg.ControllerEndpoint, "controller-endpoint", "", "a split plugin's controller socket")
	fs.StringVar(&cfg.NodeEndpoint, "node-endpoint", "", "a split plugin's node socket")
	fs.StringVar(&cfg.VolumeID, "volume-id", "", "the plugin's ID of a pre-provisioned volume to use instead of creating one")
	fs.Var(volCtx, "volume-context", "key=value of the pre-provisioned volume's context (repeatable)")
	fs.StringVar(&access, "access-mode", access, "access mode of the volume and its claims")
	fs.StringVar(&attach, "attachment-mode", attach, "file-system or block-device")
	fs.StringVar(&fsType, "fs-type", "", "file system type for a file-system attachment")
	fs.Func("mount-flag", "mount flag for a file-system attachment (repeatable)", func(s string) error {
		flags = append(flags, s)
		return nil
	})
	fs.Var(params, "parameter", "key=value passed to CreateVolume (repeatable)")
	fs.Int64Var(&cfg.CapacityBytes, "capacity", 0, "CreateVolume's required capacity in bytes (0: none)")
	fs.StringVar(&secrets, "secrets-file", "", "JSON object of secrets passed to every call that takes them")
	fs.StringVar(&cfg.MountRoot, "mount-root", "", "directory to stage and publish under (default: a temporary directory)")
	fs.StringVar(&cfg.StateDir, "state-dir", "", "directory for the mounter's state (default: a temporary directory)")
	fs.DurationVar(&cfg.Timeout, "timeout", plugintest.DefaultTimeout, "bound on each step")
	fs.StringVar(&data, "data-check", data, "shared, writer-only or off")
	fs.BoolVar(&cfg.SkipIdempotency, "skip-idempotency", false, "do not repeat the mutating calls")
	fs.BoolVar(&cfg.SkipNegative, "skip-negative", false, "do not send the requests the plugin must refuse")
	fs.BoolVar(&cfg.StrictUnstage, "strict-unstage", false, "require NodeUnstageVolume to be refused while the volume is published")
	fs.BoolVar(&opts.json, "json", false, "print the results as JSON")
	fs.BoolVar(&opts.verbose, "verbose", false, "print each step to stderr as it starts")
	fs.StringVar(&logLevel, "log-level", logLevel, "csikit's logs on stderr: off, error, warn, info, debug or trace")
	if err := fs.Parse(args); err != nil {
		return cfg, opts, err
	}
	if fs.NArg() > 0 {
		return cfg, opts, fmt.Errorf("unexpected arguments %q; every setting is a flag (see --help)", fs.Args())
	}
	var err error
	if cfg.Capability.AccessMode, err = csi.ParseAccessMode(access); err != nil {
		return cfg, opts, fmt.Errorf("--access-mode: %w", err)
	}
	if cfg.Capability.AttachmentMode, err = csi.ParseAttachmentMode(attach); err != nil {
		return cfg, opts, fmt.Errorf("--attachment-mode: %w", err)
	}
	if fsType != "" || len(flags) > 0 {
		cfg.MountOptions = &csi.MountOptions{FSType: fsType, MountFlags: flags}
	}
	if len(params) > 0 {
		cfg.Parameters = params
	}
	if len(volCtx) > 0 {
		cfg.VolumeContext = volCtx
	}
	for _, d := range []struct {
		flag string
		path *string
	}{{"--mount-root", &cfg.MountRoot}, {"--state-dir", &cfg.StateDir}} {
		if *d.path == "" {
			continue
		}
		abs, err := filepath.Abs(*d.path)
		if err != nil {
			return cfg, opts, fmt.Errorf("%s %q: %w; give an absolute path", d.flag, *d.path, err)
		}
		*d.path = abs
	}
	if cfg.DataCheck, err = plugintest.ParseDataCheck(data); err != nil {
		return cfg, opts, fmt.Errorf("--data-check: %w", err)
	}
	if secrets != "" {
		if cfg.Secrets, err = readSecrets(secrets); err != nil {
			return cfg, opts, err
		}
	}
	if logLevel != "off" {
		lvl := hclog.LevelFromString(logLevel)
		if lvl == hclog.NoLevel {
			return cfg, opts, fmt.Errorf("--log-level %q: use off, error, warn, info, debug or trace", logLevel)
		}
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "csicheck", Level: lvl, Output: stderr})
	}
	return cfg, opts, nil
}

// readSecrets reads a JSON object of strings. Its errors name the file,
// never its content.
func readSecrets(path string) (csi.Secrets, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--secrets-file: %w", err)
	}
	var s map[string]string
	if err := json.Unmarshal(b, &s); err != nil {
		// The decoder's message may quote the content: leave it out.
		return nil, fmt.Errorf("%w: --secrets-file %s is not a JSON object of strings; fix the file (its content is not shown)", csi.ErrInvalidRequest, path)
	}
	return csi.Secrets(s), nil
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

// table is csicheck's Reporter: it records every step (through the
// embedded Recorder), shows each as it starts with --verbose, and prints
// a pass/fail table or JSON at the end.
type table struct {
	*plugintest.Recorder
	progress io.Writer
}

var _ plugintest.Reporter = (*table)(nil)

// Step implements plugintest.Reporter.
func (t *table) Step(name string) {
	if t.progress != nil {
		fmt.Fprintf(t.progress, "csicheck: %s\n", name)
	}
	t.Recorder.Step(name)
}

// detail is a failure without its "step …: " prefix, for a table row.
func detail(f plugintest.Failure) string {
	return strings.TrimPrefix(f.String(), fmt.Sprintf("step %q: ", f.Step))
}

func (t *table) writeText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tRESULT\tDETAIL")
	var pass, fail, skip int
	for _, s := range t.Steps() {
		switch s.Status {
		case plugintest.StatusPass:
			pass++
			fmt.Fprintf(tw, "%s\tpass\t\n", s.Name)
		case plugintest.StatusSkip:
			skip++
			fmt.Fprintf(tw, "%s\tskip\t%s\n", s.Name, s.Reason)
		default:
			fail++
			for i, f := range s.Failures {
				name := s.Name
				if i > 0 {
					name = ""
				}
				fmt.Fprintf(tw, "%s\tFAIL\t%s\n", name, detail(f))
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range t.Notes() {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	_, err := fmt.Fprintf(w, "%d passed, %d failed, %d skipped\n", pass, fail, skip)
	return err
}

// jsonReport is the --json output.
type jsonReport struct {
	Passed bool       `json:"passed"`
	Steps  []jsonStep `json:"steps"`
	Notes  []string   `json:"notes,omitempty"`
}

type jsonStep struct {
	Step     string        `json:"step"`
	Result   string        `json:"result"`
	Reason   string        `json:"reason,omitempty"`
	Failures []jsonFailure `json:"failures,omitempty"`
}

type jsonFailure struct {
	Call   string `json:"call,omitempty"`
	Code   string `json:"code,omitempty"`
	Got    string `json:"got,omitempty"`
	Expect string `json:"expect"`
	Detail string `json:"detail,omitempty"`
	Fatal  bool   `json:"fatal,omitempty"`
	// Text is the whole failure as one line.
	Text string `json:"text"`
}

func (t *table) writeJSON(w io.Writer) error {
	out := jsonReport{Passed: !t.Failed(), Steps: []jsonStep{}, Notes: t.Notes()}
	for _, s := range t.Steps() {
		js := jsonStep{Step: s.Name, Result: string(s.Status), Reason: s.Reason}
		for _, f := range s.Failures {
			jf := jsonFailure{Call: f.Call, Got: f.Got, Expect: f.Expect, Detail: f.Detail, Fatal: f.Fatal, Text: f.String()}
			if f.Call != "" {
				jf.Code = f.Code.String()
			}
			js.Failures = append(js.Failures, jf)
		}
		out.Steps = append(out.Steps, js)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
