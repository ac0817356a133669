package quietlog_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/examples/refserver/internal/quietlog"
)

// TestLogger_Repeats: a failure repeated for one peer prints once at its
// level, its repeats at debug; another peer prints on its own; after a
// quiet Reset the next one prints again with the count of the episode
// before. Time is a value the test moves.
func TestLogger_Repeats(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	base := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Warn, DisableTime: true})
	l := quietlog.New(base, quietlog.Config{Reset: 10 * time.Second, Now: func() time.Time { return now }}).Named("raft")
	for range 5 {
		l.Error("failed to heartbeat to", "peer", "127.0.0.1:7658", "error", "connection refused")
		now = now.Add(600 * time.Millisecond)
	}
	l.Error("failed to heartbeat to", "peer", "127.0.0.1:7668", "error", "connection refused")
	if n := strings.Count(buf.String(), "failed to heartbeat to"); n != 2 {
		t.Fatalf("%d lines after 5 failures to one peer and 1 to another, want 2:\n%s", n, buf.String())
	}
	now = now.Add(11 * time.Second)
	l.Error("failed to heartbeat to", "peer", "127.0.0.1:7658", "error", "connection refused")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], "previous_episode_repeats=4") {
		t.Fatalf("after a quiet 11s, want a third line with the previous count:\n%s", buf.String())
	}
	base.SetLevel(hclog.Debug)
	l.Error("failed to heartbeat to", "peer", "127.0.0.1:7658", "error", "connection refused")
	if !strings.Contains(buf.String(), "[DEBUG] raft: failed to heartbeat to: peer=127.0.0.1:7658 error=\"connection refused\" repeat=1") {
		t.Errorf("a repeat at debug level should show in full:\n%s", buf.String())
	}
}

// TestLogger_Demote: a demoted message prints at debug only.
func TestLogger_Demote(t *testing.T) {
	var buf bytes.Buffer
	base := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Warn, DisableTime: true})
	l := quietlog.New(base, quietlog.Config{Demote: []string{"starting election"}})
	l.Warn("starting election")
	l.Warn("something else")
	if strings.Contains(buf.String(), "starting election") || !strings.Contains(buf.String(), "something else") {
		t.Errorf("output:\n%s", buf.String())
	}
	base.SetLevel(hclog.Debug)
	l.Warn("starting election")
	if !strings.Contains(buf.String(), "[DEBUG] starting election") {
		t.Errorf("the demoted message does not show at debug:\n%s", buf.String())
	}
}

// TestLogger_Info: lines below warn pass through untouched.
func TestLogger_Info(t *testing.T) {
	var buf bytes.Buffer
	l := quietlog.New(hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info, DisableTime: true}), quietlog.Config{})
	l.Info("elected", "term", 2)
	l.Info("elected", "term", 2)
	if n := strings.Count(buf.String(), "elected"); n != 2 {
		t.Errorf("%d info lines, want 2:\n%s", n, buf.String())
	}
}
