package demo_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/demo"
)

// syncBuffer is an io.Writer safe for the demo's many goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestRun_Symlink(t *testing.T) {
	var out syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := demo.Run(ctx, demo.Config{Out: &out, ExitAfterDemo: true, Mount: hostpath.MountSymlink})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	_ = res
	_ = strings.Contains
	_ = os.Stat
}
