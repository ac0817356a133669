package events_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/csikit/csikit/examples/refserver/events"
)

func TestLog_Printf_OneLinePerCall(t *testing.T) {
	tests := []struct {
		name   string
		format string
		args   []any
		want   string
	}{
		{"plain", "hello %s", []any{"world"}, "[src] hello world\n"},
		{"trailing newline dropped", "done\n", nil, "[src] done\n"},
		{"inner newlines flattened", "a\nb\nc", nil, "[src] a b c\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			events.New(&buf).Printf("src", tt.format, tt.args...)
			if buf.String() != tt.want {
				t.Errorf("got %q, want %q", buf.String(), tt.want)
			}
		})
	}
}

func TestLog_Printf_ConcurrentLinesStayWhole(t *testing.T) {
	var buf bytes.Buffer
	log := events.New(&buf)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				log.Printf("g", "%s", strings.Repeat(string(rune('a'+i)), 40))
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 400 {
		t.Fatalf("got %d lines, want 400", len(lines))
	}
	for _, l := range lines {
		body := strings.TrimPrefix(l, "[g] ")
		if len(body) != 40 || strings.Count(body, body[:1]) != 40 {
			t.Fatalf("a line was torn: %q", l)
		}
	}
}

func TestNew_NilWriter(t *testing.T) {
	if events.New(nil) != nil {
		t.Error("New(nil) should return a nil Log that prints nothing")
	}
}
