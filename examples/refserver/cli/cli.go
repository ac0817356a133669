package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/internal/quietlog"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// AddressEnv names the environment variable that sets the default
// -address of the client commands.
const AddressEnv = "REFSERVER_ADDR"

const usage = `Usage: refserver [command] [flags] [args]

csikit's reference server, node agent and CLI. Not for production.

Run modes:
  demo      (the default) a server and two node agents in this process,
            with the hostpath plugin; runs a volume's whole life, then
            serves until interrupted (-exit-after-demo to stop)
  server    the server: HTTP API, csikit's router, claim release worker;
            durable in -data-dir (-dev: in memory); with
            -bootstrap-expect 3, one server of a raft cluster
  agent     a node agent: plugin registry, mounter, node service

Client commands (against a running server, -address or $REFSERVER_ADDR):
  volume    register, create, delete, snapshot or show volumes
  plugin    show plugins and their instances
  node      show nodes and their liveness
  cluster   show the servers of a cluster and which one leads
  claim     claim a volume for an allocation (and mount it with -mount)
  release   stop an allocation: its claims are released and freed
  acl       bootstrap|create|list|delete: ACL tokens of a server with -acl

Other commands:
  version     print refserver's version
  completion  print a shell completion script: completion bash|zsh
  tls         tls init: write a CA and certificates for -tls-* flags
  keyring     keyring init|rotate|list: the keys that seal the raft log and snapshots
  help        print this help

Example:
  refserver server -data-dir /var/lib/refserver
  refserver volume create -plugin hostpath -capacity-min 1GiB data

Run "refserver COMMAND -h" for a command's flags and an example.
`

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "help", "-h", "-help", "--help":
		return true
	}
	return false
}

// Run runs the refserver command line: args are the arguments without
// the program name. Output goes to stdout (lifecycle lines, tables,
// JSON, help asked for) and stderr (errors, logs). It returns the exit
// code: ExitOK, ExitError for a failed command, ExitUsage for bad
// arguments. ctx ends the long-running modes (demo, server, agent)
// gracefully.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprint(stdout, usage)
		return ExitOK
	}
	cmd, rest := "demo", args
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, rest = args[0], args[1:]
	}
	e := &env{stdout: stdout, stderr: stderr, clock: clock.Or(nil), terminal: isTerminal(stderr)}
	if group, ok := e.groups()[cmd]; ok {
		return e.sub(ctx, cmd, rest, group)
	}
	switch cmd {
	case "demo":
		return e.demo(ctx, rest)
	case "server":
		return e.server(ctx, rest)
	case "agent":
		return e.agent(ctx, rest)
	case "claim":
		return e.claim(ctx, rest)
	case "release":
		return e.release(ctx, rest)
	case "version":
		return e.version(rest)
	case "completion":
		return e.completion(rest)
	}
	fmt.Fprintf(stderr, "refserver: unknown command %q\n\n%s", cmd, usage)
	return ExitUsage
}

// env is one invocation's outputs and clock.
type env struct {
	stdout, stderr io.Writer
	// clock times the retries of refused calls and the progress lines.
	clock clock.Clock
	// terminal is set when stderr is a terminal: progress lines go
	// there then.
	terminal bool
}

// subcommand is one subcommand of a command group (volume, plugin, …).
type subcommand struct {
	name, summary string
	run           func(context.Context, []string) int
}

// groups are the commands that take a subcommand, in help order.
func (e *env) groups() map[string][]subcommand {
	return map[string][]subcommand{
		"volume": {
			{"create", "create a volume through a controller of its plugin, and register it", e.volumeCreate},
			{"register", "register a volume that already exists in its plugin", e.volumeRegister},
			{"delete", "delete a volume in its plugin and deregister it (or only deregister it)", e.volumeDelete},
			{"status", "show the volumes, or one volume with its claims and attachments", e.volumeStatus},
			{"place", "show which nodes can take a claim on a volume, and why not the others", e.volumePlace},
			{"expand", "grow a volume in its controller and on the nodes where it is mounted", e.volumeExpand},
			{"modify", "change a volume's mutable parameters", e.volumeModify},
			{"snapshot", "create, delete or list the snapshots of volumes", e.volumeSnapshot},
			{"health", "list the volumes found abnormal or missing, where and since when", e.volumeHealth},
		},
		"plugin":  {{"status", "show the plugins, or one plugin with its instances", e.pluginStatus}},
		"node":    {{"status", "show the nodes with their liveness and plugins", e.nodeStatus}},
		"cluster": {{"status", "show the servers of the cluster and which one leads", e.clusterStatus}},
		"tls":     {{"init", "write a CA and server, agent and client certificates for a cluster on this host", e.tlsInit}},
		"acl":     e.aclCommands(),
		"keyring": {
			{"init", "create a keyring for the servers of a cluster to share", e.keyringInit},
			{"rotate", "add a new primary key to the keyring that seals the raft log and snapshots", e.keyringRotate},
			{"list", "list the keys of a keyring and which one is the primary", e.keyringList},
		},
	}
}

func (e *env) sub(ctx context.Context, name string, args []string, cmds []subcommand) int {
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.name
	}
	switch {
	case len(args) == 0:
		fmt.Fprintf(e.stderr, "refserver %s: give a subcommand: %s\n\n", name, strings.Join(names, ", "))
		groupUsage(e.stderr, name, cmds)
		return ExitUsage
	case isHelp(args[0]):
		groupUsage(e.stdout, name, cmds)
		return ExitOK
	}
	for _, c := range cmds {
		if c.name == args[0] {
			return c.run(ctx, args[1:])
		}
	}
	fmt.Fprintf(e.stderr, "refserver %s: unknown subcommand %q; want one of %s\n", name, args[0], strings.Join(names, ", "))
	return ExitUsage
}

func groupUsage(w io.Writer, name string, cmds []subcommand) {
	fmt.Fprintf(w, "Usage: refserver %s SUBCOMMAND [flags] [args]\n\nSubcommands:\n", name)
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nExample:\n  refserver %s %s -h\n\nRun \"refserver %s SUBCOMMAND -h\" for a subcommand's flags and an example.\n", name, cmds[0].name, name)
}

// command is one client command's flags and what they share.
type command struct {
	e       *env
	name    string
	fs      *flag.FlagSet
	address *string
	json    *bool
	timeout *time.Duration
	token   *string
	tlsCA   *string
	args    []string // positional arguments
	// argsText names them in the help: "ID", "[ID]".
	argsText string
}

// newCommand builds a command's flag set with the client flags every
// client command shares: -address, -json and -timeout. Its help shows
// the arguments, what it does, an example and the flags.
func (e *env) newCommand(name, args, help, example string) *command {
	c := &command{e: e, name: name, argsText: args, fs: flag.NewFlagSet("refserver "+name, flag.ContinueOnError)}
	c.fs.SetOutput(e.stderr)
	def := os.Getenv(AddressEnv)
	if def == "" {
		def = api.DefaultAddress
	}
	c.address = c.fs.String("address", def, "server API address (the default comes from $"+AddressEnv+" when set)")
	c.json = c.fs.Bool("json", false, "print JSON for machines instead of text")
	c.timeout = c.fs.Duration("timeout", 2*time.Minute, "give up after this long")
	c.token = tokenFlag(c.fs)
	c.tlsCA = clientCAFlag(c.fs)
	c.fs.Usage = func() {
		fmt.Fprintf(c.fs.Output(), "Usage: refserver %s [flags] %s\n\n%s\n\nExample:\n  %s\n\nFlags:\n", name, args, help, example)
		c.fs.PrintDefaults()
	}
	return c
}

// wantsHelp reports whether args ask for help before any "--".
func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "-h" || a == "-help" || a == "--help" {
			return true
		}
	}
	return false
}

// parseFlags parses args into fs. A bad flag is told in two lines, the
// error and where the help is, rather than with the whole help.
func parseFlags(fs *flag.FlagSet, args []string) error {
	long := fs.Usage
	fs.Usage = func() { fmt.Fprint(fs.Output(), helpHint(fs)) }
	defer func() { fs.Usage = long }()
	return fs.Parse(args)
}

func helpHint(fs *flag.FlagSet) string {
	return fmt.Sprintf("Run \"%s -h\" for its flags and an example.\n", fs.Name())
}

// printHelp prints fs's usage on w, which help asked for goes to.
func printHelp(fs *flag.FlagSet, w io.Writer) {
	out := fs.Output()
	fs.SetOutput(w)
	fs.Usage()
	fs.SetOutput(out)
}

// parse parses the flags, which may come before or after the
// positional arguments, and checks the arguments' count. It returns
// false (having printed why) when the command should stop with the exit
// code in *code.
func (c *command) parse(args []string, minArgs, maxArgs int, code *int) bool {
	if wantsHelp(args) {
		printHelp(c.fs, c.e.stdout)
		*code = ExitOK
		return false
	}
	rest := args
	for {
		if err := parseFlags(c.fs, rest); err != nil {
			*code = ExitUsage
			if errors.Is(err, flag.ErrHelp) {
				*code = ExitOK
			}
			return false
		}
		rest = c.fs.Args()
		if len(rest) == 0 {
			break
		}
		c.args, rest = append(c.args, rest[0]), rest[1:]
	}
	switch n := len(c.args); {
	case n < minArgs:
		fmt.Fprintf(c.e.stderr, "refserver %s: give the %s\n%s", c.name, c.argsText, helpHint(c.fs))
		*code = ExitUsage
		return false
	case n > maxArgs:
		fmt.Fprintf(c.e.stderr, "refserver %s: got %d arguments (%s), want %s: %s\n%s",
			c.name, n, strings.Join(c.args, " "), argCount(minArgs, maxArgs), strings.Trim(c.argsText, "[]"), helpHint(c.fs))
		*code = ExitUsage
		return false
	}
	return true
}

// arg returns the i-th positional argument, or "".
func (c *command) arg(i int) string {
	if i < len(c.args) {
		return c.args[i]
	}
	return ""
}

func argCount(lo, hi int) string {
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d to %d", lo, hi)
}

// client returns a client of -address and ctx bounded by -timeout.
func (c *command) client(ctx context.Context) (*api.Client, context.Context, context.CancelFunc, error) {
	conf, err := clientTLS(*c.tlsCA)
	if err != nil {
		return nil, nil, nil, err
	}
	cl, err := api.NewTLSClient(*c.address, conf)
	if err != nil {
		return nil, nil, nil, err
	}
	cl = cl.WithToken(cmp.Or(*c.token, os.Getenv(TokenEnv)))
	ctx, cancel := context.WithTimeout(ctx, *c.timeout)
	return cl, ctx, func() { cancel(); cl.Close() }, nil
}

// fail prints err and returns ExitError, or ExitUsage for a malformed
// request.
func (c *command) fail(err error) int {
	fmt.Fprintf(c.e.stderr, "refserver %s: %v\n", c.name, err)
	if errors.Is(err, csi.ErrInvalidID) || (errors.Is(err, csi.ErrInvalidRequest) && !isRemote(err)) {
		return ExitUsage
	}
	return ExitError
}

func isRemote(err error) bool {
	var ae *api.Error
	return errors.As(err, &ae)
}

// printJSON prints v as indented JSON.
func (c *command) printJSON(v any) int {
	enc := json.NewEncoder(c.e.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return c.fail(err)
	}
	return ExitOK
}

// newLogger returns the logger of a run mode; with asJSON it writes
// JSON lines (-log-json).
func newLogger(name, level string, asJSON bool, w io.Writer) (hclog.Logger, error) {
	l := hclog.LevelFromString(level)
	if l == hclog.NoLevel {
		return nil, fmt.Errorf("%w: -log-level %q is not one of trace, debug, info, warn, error", csi.ErrInvalidRequest, level)
	}
	// Repeated failures (raft's heartbeats to a peer that is down, an
	// agent's to its server) print once per episode; see quietlog.
	return quietlog.New(hclog.New(&hclog.LoggerOptions{Name: name, Level: l, Output: w, JSONFormat: asJSON}), quietlog.Config{}), nil
}
