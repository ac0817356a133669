package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/examples/refserver/api"
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
            with -bootstrap-expect, one server of a raft cluster
  agent     a node agent: plugin registry, mounter, node service

Client commands (against a running server, -address or $REFSERVER_ADDR):
  volume register|create|delete|status
  plugin status [ID]
  node status
  cluster status  the servers of a cluster and which one leads
  claim     claim a volume for an allocation (and mount it with -mount)
  release   stop an allocation: its claims are released and freed

Run "refserver COMMAND -h" for a command's flags.
`

// Run runs the refserver command line: args are the arguments without
// the program name. Output goes to stdout (lifecycle lines, tables,
// JSON) and stderr (errors, logs). It returns the exit code: ExitOK,
// ExitError for a failed command, ExitUsage for bad arguments. ctx ends
// the long-running modes (demo, server, agent) gracefully.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd, rest := "demo", args
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, rest = args[0], args[1:]
	}
	e := &env{stdout: stdout, stderr: stderr, clock: clock.Or(nil)}
	switch cmd {
	case "demo":
		return e.demo(ctx, rest)
	case "server":
		return e.server(ctx, rest)
	case "agent":
		return e.agent(ctx, rest)
	case "volume":
		return e.sub(ctx, "volume", rest, map[string]func(context.Context, []string) int{
			"register": e.volumeRegister, "create": e.volumeCreate, "delete": e.volumeDelete, "status": e.volumeStatus,
		})
	case "plugin":
		return e.sub(ctx, "plugin", rest, map[string]func(context.Context, []string) int{"status": e.pluginStatus})
	case "node":
		return e.sub(ctx, "node", rest, map[string]func(context.Context, []string) int{"status": e.nodeStatus})
	case "cluster":
		return e.sub(ctx, "cluster", rest, map[string]func(context.Context, []string) int{"status": e.clusterStatus})
	case "claim":
		return e.claim(ctx, rest)
	case "release":
		return e.release(ctx, rest)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return ExitOK
	}
	fmt.Fprintf(stderr, "refserver: unknown command %q\n\n%s", cmd, usage)
	return ExitUsage
}

// env is one invocation's outputs and clock.
type env struct {
	stdout, stderr io.Writer
	// clock times the retries of refused calls.
	clock clock.Clock
}

func (e *env) sub(ctx context.Context, name string, args []string, cmds map[string]func(context.Context, []string) int) int {
	if len(args) == 0 {
		fmt.Fprintf(e.stderr, "refserver %s: give a subcommand: %s\n", name, strings.Join(sortedNames(cmds), ", "))
		return ExitUsage
	}
	f, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(e.stderr, "refserver %s: unknown subcommand %q; want one of %s\n", name, args[0], strings.Join(sortedNames(cmds), ", "))
		return ExitUsage
	}
	return f(ctx, args[1:])
}

func sortedNames[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// command is one client command's flags and what they share.
type command struct {
	e       *env
	name    string
	fs      *flag.FlagSet
	address *string
	json    *bool
	timeout *time.Duration
	args    []string // positional arguments
}

// newCommand builds a command's flag set with the client flags every
// client command shares: -address, -json and -timeout.
func (e *env) newCommand(name, args, help string) *command {
	c := &command{e: e, name: name, fs: flag.NewFlagSet("refserver "+name, flag.ContinueOnError)}
	c.fs.SetOutput(e.stderr)
	def := os.Getenv(AddressEnv)
	if def == "" {
		def = api.DefaultAddress
	}
	c.address = c.fs.String("address", def, "server API address (default from $"+AddressEnv+")")
	c.json = c.fs.Bool("json", false, "print JSON for machines instead of text")
	c.timeout = c.fs.Duration("timeout", 2*time.Minute, "give up after this long")
	c.fs.Usage = func() {
		fmt.Fprintf(e.stderr, "Usage: refserver %s [flags] %s\n\n%s\n\nFlags:\n", name, args, help)
		c.fs.PrintDefaults()
	}
	return c
}

// parse parses the flags, which may come before or after the
// positional arguments, and checks the arguments' count. It returns
// false (having printed why) when the command should stop with the exit
// code in *code.
func (c *command) parse(args []string, minArgs, maxArgs int, code *int) bool {
	rest := args
	for {
		if err := c.fs.Parse(rest); err != nil {
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
	if n := len(c.args); n < minArgs || n > maxArgs {
		fmt.Fprintf(c.e.stderr, "refserver %s: got %d arguments (%q), want %s\n",
			c.name, n, c.args, argCount(minArgs, maxArgs))
		c.fs.Usage()
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
	cl, err := api.NewClient(*c.address, nil)
	if err != nil {
		return nil, nil, nil, err
	}
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

// newLogger returns the logger of a run mode.
func newLogger(name, level string, w io.Writer) (hclog.Logger, error) {
	l := hclog.LevelFromString(level)
	if l == hclog.NoLevel {
		return nil, fmt.Errorf("%w: -log-level %q is not one of trace, debug, info, warn, error", csi.ErrInvalidRequest, level)
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: l, Output: w}), nil
}
