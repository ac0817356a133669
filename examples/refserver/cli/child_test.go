package cli_test

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// childEnv makes the test binary run as the refserver program (see
// TestMain): tests start it as a child process to kill it with SIGKILL
// or to break its stdout, which an in-process run cannot show.
const childEnv = "REFSERVER_TEST_CHILD"

// child is the refserver program running in a child process.
type child struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	errOut *syncBuffer
	lines  chan string // every stdout line, until the pipe closes
	done   chan error  // cmd.Wait's result
	stdout io.Closer   // the read end of its stdout
}

// startChild starts the program with args, its stdout read line by
// line; extraEnv adds to the environment.
func startChild(t *testing.T, extraEnv []string, args ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), childEnv+"=1"), extraEnv...)
	c := &child{cmd: cmd, out: &syncBuffer{}, errOut: &syncBuffer{}, lines: make(chan string, 1024), done: make(chan error, 1)}
	cmd.Stderr = c.errOut
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	c.stdout = stdout
	must(t, cmd.Start())
	go func() {
		lw := &lineWriter{line: func(l string) {
			_, _ = c.out.Write([]byte(l + "\n"))
			select {
			case c.lines <- l:
			default: // nobody waits for lines any more
			}
		}}
		_, _ = io.Copy(lw, stdout)
		c.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // fails harmlessly once it has ended
		<-c.done
	})
	return c
}

// waitLine waits for a stdout line starting with prefix and returns the
// rest of it.
func (c *child) waitLine(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case l := <-c.lines:
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest
			}
		case err := <-c.done:
			c.done <- err
			t.Fatalf("refserver %s exited (%v) before printing %q\nstdout:\n%s\nstderr:\n%s", c.cmd.Args[1:], err, prefix, c.out, c.errOut)
		case <-timeout.C:
			t.Fatalf("refserver %s printed no %q in 30s\nstdout:\n%s\nstderr:\n%s", c.cmd.Args[1:], prefix, c.out, c.errOut)
		}
	}
}

// stop sends sig and waits for the process to end, returning its exit
// status (-1 when a signal ended it).
func (c *child) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	must(t, c.cmd.Process.Signal(sig))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	select {
	case err := <-c.done:
		c.done <- err
	case <-ctx.Done():
		_ = c.cmd.Process.Kill()
		c.done <- <-c.done
		t.Fatalf("refserver %s did not stop within 60s of %v\nstdout:\n%s\nstderr:\n%s", c.cmd.Args[1:], sig, c.out, c.errOut)
	}
	return c.cmd.ProcessState.ExitCode()
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	return lis
}
