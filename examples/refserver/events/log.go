package events

import (
	"fmt"
	"io"
	"strings"
	"sync"
)

// Log writes one line per lifecycle step, prefixed with its source in
// brackets. Lines from many goroutines never interleave within a line.
// A nil *Log prints nothing, so components take one without a check.
// All methods are safe for concurrent use.
type Log struct {
	mu sync.Mutex
	w  io.Writer
}

// New returns a Log writing to w; a nil w means a Log that prints
// nothing.
func New(w io.Writer) *Log {
	if w == nil {
		return nil
	}
	return &Log{w: w}
}

// Printf prints "[source] message" on one line. A trailing newline in
// format is dropped, and newlines inside the message are replaced by
// spaces, so one call is always one line. Write errors are ignored: the
// log is for people, and a closed terminal must not stop the server.
func (l *Log) Printf(source, format string, args ...any) {
	if l == nil {
		return
	}
	msg := strings.TrimRight(fmt.Sprintf(format, args...), "\n")
	msg = strings.ReplaceAll(msg, "\n", " ")
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = fmt.Fprintf(l.w, "[%s] %s\n", source, msg)
}
