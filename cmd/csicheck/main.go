package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

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
	if err == nil && opts.junit != "" {
		err = t.writeJUnit(opts.junit)
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
