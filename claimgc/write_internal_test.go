package claimgc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// recordingApplier records every command it is given and answers with
// refuse: for a batch, the first refusal of one of its commands (as a
// store fails a whole batch for one command), else for the command.
type recordingApplier struct {
	refuse func(cmd state.Command) error

	mu    sync.Mutex
	calls []string
}

func (a *recordingApplier) Apply(_ context.Context, cmd state.Command) (state.Result, error) {
	cmds := []state.Command{cmd}
	kind := string(cmd.Kind())
	if b, ok := cmd.(state.Batch); ok {
		cmds = b.Commands
		kind = fmt.Sprintf("batch(%d)", len(cmds))
	}
	a.mu.Lock()
	a.calls = append(a.calls, kind)
	a.mu.Unlock()
	for _, c := range cmds {
		if err := a.refuse(c); err != nil {
			return state.Result{}, err
		}
	}
	return state.Result{}, nil
}

func (a *recordingApplier) callList() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return fmt.Sprint(a.calls)
}

func free(alloc string) state.Command {
	return state.FreeClaim{Namespace: "default", VolumeID: "v", AllocationID: alloc}
}

// logDown is a host log that cannot commit: no csi sentinel.
var logDown = errors.New("log unavailable")

func TestWorker_Write(t *testing.T) {
	gone := func(c state.Command) error {
		if f, ok := c.(state.FreeClaim); ok && f.AllocationID == "gone" {
			return fmt.Errorf("%w: no claim of gone", csi.ErrClaimNotFound)
		}
		return nil
	}
	tests := []struct {
		name      string
		cmds      []state.Command
		refuse    func(state.Command) error
		cancelled bool
		wantCalls string
		wantErrs  []error // by command; nil: none
		// counters after the write
		wantWrites, wantApplies uint64
	}{
		{
			name: "one command on its own", cmds: []state.Command{free("a")}, refuse: gone,
			wantCalls: "[free-claim]", wantErrs: []error{nil}, wantWrites: 1, wantApplies: 1,
		},
		{
			name: "a step's commands in one batch", cmds: []state.Command{free("a"), free("b"), free("c")}, refuse: gone,
			wantCalls: "[batch(3)]", wantErrs: []error{nil, nil, nil}, wantWrites: 3, wantApplies: 1,
		},
		{
			name: "a refused command gets its own error, the others none", cmds: []state.Command{free("a"), free("gone"), free("c")}, refuse: gone,
			wantCalls: "[batch(3) free-claim free-claim free-claim]",
			wantErrs:  []error{nil, csi.ErrClaimNotFound, nil}, wantWrites: 3, wantApplies: 4,
		},
		{
			name: "an error of the log is every command's, not retried", cmds: []state.Command{free("a"), free("b")},
			refuse:    func(state.Command) error { return logDown },
			wantCalls: "[batch(2)]", wantErrs: []error{logDown, logDown}, wantWrites: 2, wantApplies: 1,
		},
		{
			name: "nothing is written once ctx ended", cmds: []state.Command{free("a"), free("b")}, refuse: gone, cancelled: true,
			wantCalls: "[]", wantErrs: []error{context.Canceled, context.Canceled},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &recordingApplier{refuse: tt.refuse}
			w := &Worker{cfg: Config{Applier: a}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancelled {
				cancel()
			}
			errs := w.write(ctx, tt.cmds)
			if len(errs) != len(tt.cmds) {
				t.Fatalf("%d errors for %d commands", len(errs), len(tt.cmds))
			}
			for i, err := range errs {
				if want := tt.wantErrs[i]; (want == nil) != (err == nil) || (want != nil && !errors.Is(err, want)) {
					t.Errorf("command %d: err %v, want %v", i, err, want)
				}
			}
			if got := a.callList(); got != tt.wantCalls {
				t.Errorf("applier calls = %s, want %s", got, tt.wantCalls)
			}
			if w.writes.Load() != tt.wantWrites || w.applies.Load() != tt.wantApplies {
				t.Errorf("writes %d, applies %d; want %d and %d", w.writes.Load(), w.applies.Load(), tt.wantWrites, tt.wantApplies)
			}
		})
	}
}
