package plugintest

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"
)

// ErrCannotConnect reports that the harness could not reach a plugin's
// socket before any check ran: the socket is missing, is not a stream
// socket, refuses connections or may not be opened. It is a setup
// failure, not the plugin's: csicheck exits 2 on it. Fix the path or
// start the plugin, then run again.
var ErrCannotConnect = errors.New("cannot connect")

// connectTimeout bounds the first connection to each socket, so that a
// plugin that is not there fails the setup at once, not after a step's
// whole Config.Timeout.
const connectTimeout = 2 * time.Second

// preflight connects once to each socket cfg names and closes the
// connection. Its errors wrap ErrCannotConnect and read "cannot connect
// to /path (--endpoint): no such file or directory".
func preflight(cfg Config) error {
	for _, e := range []struct{ field, v string }{
		{"Endpoint", cfg.Endpoint}, {"ControllerEndpoint", cfg.ControllerEndpoint}, {"NodeEndpoint", cfg.NodeEndpoint},
		{"SecondNodeEndpoint", cfg.SecondNodeEndpoint},
	} {
		if e.v == "" {
			continue
		}
		if err := dialOnce(socketPath(e.v)); err != nil {
			return fmt.Errorf("%w to %s (%s): %s", ErrCannotConnect, socketPath(e.v), cfg.setting(e.field), err)
		}
	}
	return nil
}

// dialOnce reports why path is not a unix stream socket that accepts a
// connection, in the words of the system call that failed.
func dialOnce(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return explain(pe.Err)
		}
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		kind := "a regular file"
		if fi.IsDir() {
			kind = "a directory"
		} else if fi.Mode().Type() != 0 {
			kind = "a " + fi.Mode().Type().String() + " file"
		}
		return fmt.Errorf("not a socket (%s); give the socket the plugin listens on", kind)
	}
	c, err := net.DialTimeout("unix", path, connectTimeout)
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Err != nil {
			var se *os.SyscallError
			if errors.As(oe.Err, &se) {
				return explain(se.Err)
			}
			return explain(oe.Err)
		}
		return err
	}
	return c.Close()
}

// explain adds what to do next to the errno's own text.
func explain(err error) error {
	switch {
	case errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("%w; is the plugin running, and listening there?", err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%w; nothing accepts connections there (a stale socket of a stopped plugin?)", err)
	case errors.Is(err, syscall.EPROTOTYPE):
		return fmt.Errorf("%w; the socket is not a stream socket, which gRPC needs", err)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return fmt.Errorf("%w; run with the rights the plugin's socket asks for (often root)", err)
	}
	return err
}

// maxUnavailable bounds the attempts of a call that keeps answering
// Unavailable (or another retryable code): a plugin that is down fails
// its step after a few hundred milliseconds of backoff, not after the
// step's whole Config.Timeout.
const maxUnavailable = 5
