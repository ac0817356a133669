package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"

	"github.com/csikit/csikit/plugintest"
)

// setPathCommands turns --create-path-cmd, --remove-path-cmd and
// --check-path-cmd into the Config's funcs.
func (f *flags) setPathCommands(stderr io.Writer) {
	if f.createCmd != "" {
		f.cfg.CreatePath = func(ctx context.Context, p string) error {
			_, err := pathCommand(ctx, "--create-path-cmd", f.createCmd, p, stderr)
			return err
		}
	}
	if f.removeCmd != "" {
		f.cfg.RemovePath = func(ctx context.Context, p string) error {
			_, err := pathCommand(ctx, "--remove-path-cmd", f.removeCmd, p, stderr)
			return err
		}
	}
	if f.checkCmd != "" {
		f.cfg.CheckPath = func(ctx context.Context, p string) (plugintest.PathKind, error) {
			out, err := pathCommand(ctx, "--check-path-cmd", f.checkCmd, p, stderr)
			if err != nil {
				return plugintest.PathOther, err
			}
			kind, err := plugintest.ParsePathKind(strings.TrimSpace(out))
			if err != nil {
				return plugintest.PathOther, fmt.Errorf("--check-path-cmd %q printed %q for %s: %w", f.checkCmd, strings.TrimSpace(out), p, err)
			}
			return kind, nil
		}
	}
}

// pathCommand runs cmd, split at spaces, with path as its last argument
// (no shell, so the path needs no quoting), and returns its stdout; its
// stderr goes to csicheck's.
func pathCommand(ctx context.Context, flag, cmd, path string, stderr io.Writer) (string, error) {
	args := strings.Fields(cmd)
	if len(args) == 0 {
		return "", fmt.Errorf("%s is blank", flag)
	}
	var out bytes.Buffer
	c := exec.CommandContext(ctx, args[0], append(args[1:], path)...)
	c.Stdout, c.Stderr = &out, stderr
	if err := c.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %q %s: %w", flag, cmd, path, err)
	}
	return out.String(), nil
}
