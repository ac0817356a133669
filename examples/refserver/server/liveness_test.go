package server_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/server"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestLiveness_Status(t *testing.T) {
	const ttl = 10 * time.Second
	tests := []struct {
		name  string
		setup func(l *server.Liveness)
		at    time.Time
		want  csi.NodeStatus
	}{
		{"never registered", func(*server.Liveness) {}, t0, csi.NodeStatusUnknown},
		{"just registered", func(l *server.Liveness) { mustRegister(t, l, "n1", t0) }, t0, csi.NodeStatusReady},
		{"at the TTL", func(l *server.Liveness) { mustRegister(t, l, "n1", t0) }, t0.Add(ttl), csi.NodeStatusReady},
		{"past the TTL", func(l *server.Liveness) { mustRegister(t, l, "n1", t0) }, t0.Add(ttl + time.Nanosecond), csi.NodeStatusDown},
		{"heartbeat keeps it ready", func(l *server.Liveness) {
			mustRegister(t, l, "n1", t0)
			mustHeartbeat(t, l, "n1", t0.Add(ttl))
		}, t0.Add(2 * ttl), csi.NodeStatusReady},
		{"heartbeat after down makes it ready", func(l *server.Liveness) {
			mustRegister(t, l, "n1", t0)
			mustHeartbeat(t, l, "n1", t0.Add(5*ttl))
		}, t0.Add(5 * ttl), csi.NodeStatusReady},
		{"forgotten", func(l *server.Liveness) {
			mustRegister(t, l, "n1", t0)
			l.Forget("n1")
		}, t0, csi.NodeStatusGone},
		{"registered again after forgotten", func(l *server.Liveness) {
			mustRegister(t, l, "n1", t0)
			l.Forget("n1")
			mustRegister(t, l, "n1", t0.Add(time.Second))
		}, t0.Add(time.Second), csi.NodeStatusReady},
		{"left", func(l *server.Liveness) {
			mustRegister(t, l, "n1", t0)
			l.Leave("n1")
		}, t0, csi.NodeStatusDown},
		{"registered again after it left", func(l *server.Liveness) {
			mustRegister(t, l, "n1", t0)
			l.Leave("n1")
			mustRegister(t, l, "n1", t0.Add(time.Second))
		}, t0.Add(time.Second), csi.NodeStatusReady},
		{"clock steps back", func(l *server.Liveness) {
			mustRegister(t, l, "n1", t0)
			mustHeartbeat(t, l, "n1", t0.Add(-time.Hour))
		}, t0.Add(ttl), csi.NodeStatusReady},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := server.NewLiveness(ttl)
			tt.setup(l)
			if got := l.Status("n1", tt.at); got != tt.want {
				t.Errorf("status %s, want %s", got, tt.want)
			}
		})
	}
}

func TestLiveness_Register_Refused(t *testing.T) {
	tests := []struct {
		name, id, addr string
		want           error
	}{
		{"bad node ID", "no/slash", "127.0.0.1:1", csi.ErrInvalidID},
		{"empty node ID", "", "127.0.0.1:1", csi.ErrInvalidID},
		{"no address", "n1", "", csi.ErrInvalidRequest},
		{"address with a space", "n1", "127.0.0.1 :1", csi.ErrInvalidRequest},
		{"address with a NUL", "n1", "127.0.0.1:1\x00evil", csi.ErrInvalidRequest},
		{"address with a newline", "n1", "127.0.0.1:1\nnode n2 registered", csi.ErrInvalidRequest},
		{"address with an escape sequence", "n1", "\x1b[2J127.0.0.1:1", csi.ErrInvalidRequest},
		{"address that is not UTF-8", "n1", "127.0.0.1:\xff", csi.ErrInvalidRequest},
		{"address too long", "n1", strings.Repeat("a", 513) + ":1", csi.ErrInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := server.NewLiveness(0)
			_, err := l.Register(tt.id, tt.addr, t0)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			// The message quotes the address escaped, never raw.
			if msg := err.Error(); strings.ContainsFunc(msg, func(r rune) bool { return r < 0x20 || r == 0x7f || r == utf8.RuneError }) {
				t.Errorf("error holds a raw control character: %q", msg)
			}
			if got := l.Status(tt.id, t0); got != csi.NodeStatusUnknown {
				t.Errorf("a refused registration left status %s", got)
			}
		})
	}
}

func TestLiveness_Register_Changed(t *testing.T) {
	l := server.NewLiveness(0)
	steps := []struct {
		addr string
		want bool
	}{{"a:1", true}, {"a:1", false}, {"a:2", true}}
	for i, s := range steps {
		changed, err := l.Register("n1", s.addr, t0)
		if err != nil || changed != s.want {
			t.Errorf("step %d: changed %t, %v; want %t", i, changed, err, s.want)
		}
	}
	if addr, err := l.Address("n1"); err != nil || addr != "a:2" {
		t.Errorf("address %q, %v; want a:2", addr, err)
	}
}

func TestLiveness_Heartbeat_UnknownNode(t *testing.T) {
	l := server.NewLiveness(0)
	if err := l.Heartbeat("n1", t0); !errors.Is(err, csi.ErrNodeNotFound) {
		t.Fatalf("got %v, want csi.ErrNodeNotFound", err)
	}
	mustRegister(t, l, "n1", t0)
	l.Forget("n1")
	if err := l.Heartbeat("n1", t0); !errors.Is(err, csi.ErrNodeNotFound) {
		t.Fatalf("forgotten node: got %v, want csi.ErrNodeNotFound", err)
	}
}

// TestLiveness_Leave: a node that left refuses heartbeats until it
// registers again, keeps its address, and leaves only once.
func TestLiveness_Leave(t *testing.T) {
	l := server.NewLiveness(time.Minute)
	if l.Leave("n1") {
		t.Error("an unknown node left")
	}
	mustRegister(t, l, "n1", t0)
	if !l.Leave("n1") || l.Leave("n1") {
		t.Error("Leave should report true once, then false")
	}
	if err := l.Heartbeat("n1", t0); !errors.Is(err, csi.ErrNodeNotFound) {
		t.Errorf("heartbeat after leaving: %v, want csi.ErrNodeNotFound", err)
	}
	if addr, err := l.Address("n1"); err != nil || addr == "" {
		t.Errorf("address after leaving: %q, %v", addr, err)
	}
}

func TestLiveness_Address_Unknown(t *testing.T) {
	l := server.NewLiveness(0)
	if _, err := l.Address("n1"); !errors.Is(err, csi.ErrNodeNotReady) {
		t.Fatalf("got %v, want csi.ErrNodeNotReady", err)
	}
	mustRegister(t, l, "n1", t0)
	// A node that is down keeps its address: it may come back.
	if addr, err := l.Address("n1"); err != nil || addr != "127.0.0.1:4747" {
		t.Fatalf("got %q, %v", addr, err)
	}
}

func TestLiveness_Nodes_Sorted(t *testing.T) {
	l := server.NewLiveness(time.Second)
	mustRegister(t, l, "n2", t0)
	mustRegister(t, l, "n1", t0.Add(-time.Minute))
	got := l.Nodes(t0)
	if len(got) != 2 || got[0].ID != "n1" || got[1].ID != "n2" {
		t.Fatalf("nodes %+v, want n1 then n2", got)
	}
	if got[0].Status != csi.NodeStatusDown || got[1].Status != csi.NodeStatusReady {
		t.Errorf("statuses %s, %s; want down, ready", got[0].Status, got[1].Status)
	}
	if !got[1].LastHeartbeat.Equal(t0) {
		t.Errorf("last heartbeat %s, want %s", got[1].LastHeartbeat, t0)
	}
}

func TestNewLiveness_DefaultTTL(t *testing.T) {
	if got := server.NewLiveness(0).TTL(); got != server.DefaultHeartbeatTTL {
		t.Errorf("TTL %s, want %s", got, server.DefaultHeartbeatTTL)
	}
}

func mustRegister(t *testing.T, l *server.Liveness, id string, at time.Time) {
	t.Helper()
	if _, err := l.Register(id, "127.0.0.1:4747", at); err != nil {
		t.Fatal(err)
	}
}

func mustHeartbeat(t *testing.T, l *server.Liveness, id string, at time.Time) {
	t.Helper()
	if err := l.Heartbeat(id, at); err != nil {
		t.Fatal(err)
	}
}
