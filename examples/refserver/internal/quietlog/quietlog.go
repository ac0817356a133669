// Package quietlog keeps a failure that repeats from flooding the
// console: raft's "failed to heartbeat to" every 0.6 s while a peer is
// down, an agent's failed heartbeat every interval while its server is.
//
// New wraps an hclog.Logger. A warning or error is keyed by its message
// and the peer it names (the first of the "peer", "server", "address",
// "server-id" arguments). The first one of an episode prints as it is;
// the repeats print at debug only, with their full detail. An episode
// ends once its key has been quiet for Config.Reset: the next failure
// prints again, saying how many times the one before repeated. So a
// console shows one line per change of state, with a count.
package quietlog

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// DefaultReset is how long a failure must be quiet for its next
// occurrence to print again: a few of raft's heartbeat backoffs.
const DefaultReset = 10 * time.Second

// Config configures New.
type Config struct {
	// Reset ends an episode; 0 means DefaultReset.
	Reset time.Duration
	// Now is the time source; nil means time.Now.
	Now func() time.Time
	// Demote lists messages that print at debug level whatever their
	// level: expected events a library reports as warnings (raft's
	// "heartbeat timeout reached, starting election" on a single
	// server's every start).
	Demote []string
}

// episode is one run of a repeated failure.
type episode struct {
	last    time.Time
	repeats int
}

// state is shared by a logger and the loggers derived from it.
type state struct {
	cfg      Config
	mu       sync.Mutex
	episodes map[string]*episode
}

// Logger is the wrapping logger; see the package doc.
type Logger struct {
	hclog.Logger
	st *state
}

var _ hclog.Logger = (*Logger)(nil)

// New wraps l.
func New(l hclog.Logger, cfg Config) *Logger {
	if cfg.Reset <= 0 {
		cfg.Reset = DefaultReset
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Logger{Logger: l, st: &state{cfg: cfg, episodes: map[string]*episode{}}}
}

func (q *Logger) Warn(msg string, args ...any)  { q.Log(hclog.Warn, msg, args...) }
func (q *Logger) Error(msg string, args ...any) { q.Log(hclog.Error, msg, args...) }

// Log logs as the wrapped logger does, but prints a repeated warning or
// error at debug.
func (q *Logger) Log(level hclog.Level, msg string, args ...any) {
	if level < hclog.Warn {
		q.Logger.Log(level, msg, args...)
		return
	}
	if slices.Contains(q.st.cfg.Demote, msg) {
		q.Logger.Debug(msg, args...)
		return
	}
	key := q.Logger.Name() + "\x00" + msg + "\x00" + peerOf(args)
	now := q.st.cfg.Now()
	q.st.mu.Lock()
	ep := q.st.episodes[key]
	prev := 0
	fresh := ep == nil || now.Sub(ep.last) > q.st.cfg.Reset
	if fresh {
		if ep != nil {
			prev = ep.repeats
		}
		ep = &episode{}
		q.st.episodes[key] = ep
	} else {
		ep.repeats++
	}
	ep.last = now
	repeats := ep.repeats
	q.st.mu.Unlock()
	if !fresh {
		q.Logger.Debug(msg, append(args, "repeat", repeats)...)
		return
	}
	if prev > 0 {
		args = append(args, "previous_episode_repeats", prev)
	}
	q.Logger.Log(level, msg+" (repeats are logged at debug level until it has been quiet for "+q.st.cfg.Reset.String()+")", args...)
}

// peerOf returns the value of the first argument that names a peer.
func peerOf(args []any) string {
	for i := 0; i+1 < len(args); i += 2 {
		switch args[i] {
		case "peer", "server", "address", "server-id":
			return fmt.Sprint(args[i+1])
		}
	}
	return ""
}

func (q *Logger) With(args ...any) hclog.Logger {
	return &Logger{Logger: q.Logger.With(args...), st: q.st}
}

func (q *Logger) Named(name string) hclog.Logger {
	return &Logger{Logger: q.Logger.Named(name), st: q.st}
}

func (q *Logger) ResetNamed(name string) hclog.Logger {
	return &Logger{Logger: q.Logger.ResetNamed(name), st: q.st}
}
