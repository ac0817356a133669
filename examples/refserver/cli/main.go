package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Main runs the command line as a program, with the process's
// arguments (without the program name) and outputs, and returns the
// exit code. SIGINT and SIGTERM end the long-running modes gracefully.
//
// SIGPIPE is ignored: with `refserver | tee log` and Ctrl-C, tee dies
// first, and the default SIGPIPE would kill refserver at its next line
// of output, in the middle of its drain, leaving mounts and its
// temporary directory behind. Ignored, a write to the closed pipe fails
// instead (and the lifecycle lines ignore that failure), so the drain
// runs to its end.
func Main(args []string) int {
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return Run(ctx, args, os.Stdout, os.Stderr)
}
