package claimgc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// gateApplier blocks its first Apply until release is closed, records
// every command it is given, and refuses FreeClaim of allocation "gone".
type gateApplier struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once

	mu    sync.Mutex
	calls []state.Command
}

func (a *gateApplier) Apply(ctx context.Context, cmd state.Command) (state.Result, error) {
	a.mu.Lock()
	a.calls = append(a.calls, cmd)
	a.mu.Unlock()
	first := false
	a.once.Do(func() { first = true })
	if first {
		close(a.entered)
		select {
		case <-a.release:
		case <-ctx.Done():
			return state.Result{}, ctx.Err()
		}
	}
	refuse := func(c state.Command) error {
		if f, ok := c.(state.FreeClaim); ok && f.AllocationID == "gone" {
			return fmt.Errorf("%w: no claim of gone", csi.ErrClaimNotFound)
		}
		return nil
	}
	if b, ok := cmd.(state.Batch); ok {
		for _, c := range b.Commands {
			if err := refuse(c); err != nil {
				return state.Result{}, err
			}
		}
		return state.Result{}, nil
	}
	return state.Result{}, refuse(cmd)
}

func (a *gateApplier) kinds() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, c := range a.calls {
		if b, ok := c.(state.Batch); ok {
			out = append(out, fmt.Sprintf("batch(%d)", len(b.Commands)))
			continue
		}
		out = append(out, string(c.Kind()))
	}
	return out
}

// runCommitter runs a committer writing to a gateApplier until stop,
// or the end of the test.
func runCommitter(t *testing.T, ctx context.Context) (a *gateApplier, c *committer, stop func()) {
	a = &gateApplier{entered: make(chan struct{}), release: make(chan struct{})}
	runCtx, cancel := context.WithCancel(ctx)
	c = newCommitter(runCtx, a, new(atomic.Uint64), new(atomic.Uint64))
	var wg sync.WaitGroup
	wg.Go(c.run)
	stop = sync.OnceFunc(func() { cancel(); wg.Wait() })
	t.Cleanup(stop)
	return a, c, stop
}

func free(alloc string) state.Command {
	return state.FreeClaim{Namespace: "default", VolumeID: "v", AllocationID: alloc}
}

func TestCommitter_Write(t *testing.T) {
	tests := []struct {
		name      string
		queued    []string // allocations freed while the first write is in flight
		wantKinds []string
		wantErr   map[string]bool // allocations whose apply fails
	}{
		{
			name:      "grouped into one batch",
			queued:    []string{"a", "b", "c"},
			wantKinds: []string{"free-claim", "batch(3)"},
		},
		{
			name:      "a refused command gets its own error, the others none",
			queued:    []string{"a", "gone", "c"},
			wantKinds: []string{"free-claim", "batch(3)", "free-claim", "free-claim", "free-claim"},
			wantErr:   map[string]bool{"gone": true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			a, c, _ := runCommitter(t, ctx)

			first := make(chan error, 1)
			go func() { first <- c.apply(ctx, free("first")) }()
			<-a.entered
			errs := make(map[string]chan error)
			for _, id := range tt.queued {
				ch := make(chan error, 1)
				errs[id] = ch
				go func() { ch <- c.apply(ctx, free(id)) }()
			}
			for {
				c.mu.Lock()
				n := len(c.pending)
				c.mu.Unlock()
				if n == len(tt.queued) {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatal("writes never queued")
				case <-time.After(time.Millisecond):
				}
			}
			close(a.release)
			if err := <-first; err != nil {
				t.Fatalf("first write: %v", err)
			}
			for _, id := range tt.queued {
				err := <-errs[id]
				if tt.wantErr[id] != (err != nil) {
					t.Errorf("write %s: err %v, want error %v", id, err, tt.wantErr[id])
				}
				if err != nil && !errors.Is(err, csi.ErrClaimNotFound) {
					t.Errorf("write %s: err %v, want ErrClaimNotFound", id, err)
				}
			}
			if got := a.kinds(); fmt.Sprint(got) != fmt.Sprint(tt.wantKinds) {
				t.Errorf("applier calls = %v, want %v", got, tt.wantKinds)
			}
			if c.writes.Load() != uint64(1+len(tt.queued)) {
				t.Errorf("writes = %d", c.writes.Load())
			}
		})
	}
}

func TestCommitter_Apply_StopsWithContext(t *testing.T) {
	a := &gateApplier{entered: make(chan struct{}), release: make(chan struct{})}
	var writes, applies atomic.Uint64
	runCtx, stop := context.WithCancel(context.Background())
	c := newCommitter(runCtx, a, &writes, &applies)
	var wg sync.WaitGroup
	wg.Go(c.run)

	first := make(chan error, 1)
	go func() { first <- c.apply(context.Background(), free("first")) }()
	<-a.entered
	queued := make(chan error, 1)
	go func() { queued <- c.apply(context.Background(), free("queued")) }()
	stop() // the Worker is disabled while a write is in flight
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Errorf("write in flight: %v, want context.Canceled", err)
	}
	if err := <-queued; !errors.Is(err, context.Canceled) {
		t.Errorf("queued write: %v, want context.Canceled", err)
	}
	wg.Wait()
}

// TestCommitter_Submit checks that commands submitted together go out
// in one batch, after the ones before them, written by the committer's
// goroutine once kicked, and that each write's outcome can be collected
// later and more than once.
func TestCommitter_Submit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, c, stop := runCommitter(t, ctx)

	first := c.submit(free("first"))
	c.kick()
	<-a.entered // the first write is in flight, made by the committer's goroutine
	together := c.submit(free("a"), free("gone"), free("c"))
	close(a.release)
	for i, w := range append(first, together...) {
		err := w.wait(ctx)
		if again := w.wait(ctx); !errors.Is(again, err) {
			t.Errorf("write %d: second wait = %v, first %v", i, again, err)
		}
		if wantErr := i == 2; wantErr != (err != nil) || (err != nil && !errors.Is(err, csi.ErrClaimNotFound)) {
			t.Errorf("write %d: err %v, want an error: %t", i, err, wantErr)
		}
	}
	want := []string{"free-claim", "batch(3)", "free-claim", "free-claim", "free-claim"}
	if got := a.kinds(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("applier calls = %v, want %v (the batch refused as a whole, then each command on its own)", got, want)
	}
	if c.applies.Load() != 5 || c.writes.Load() != 4 {
		t.Errorf("applies %d, writes %d; want 5 and 4", c.applies.Load(), c.writes.Load())
	}

	stop()
	if err := c.submit(free("late"))[0].wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("write after the committer stopped: %v, want context.Canceled", err)
	}
}
