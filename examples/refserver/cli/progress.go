package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/csikit/csikit/examples/refserver/api"
)

// isTerminal reports whether w is a terminal: progress lines, which
// rewrite themselves with a carriage return, go only to one.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progress shows what a command waits for on one terminal line, which
// each show rewrites, and clears it at done. It shows nothing (and
// costs nothing) when its output is not a terminal or -json is given.
type progress struct {
	w    io.Writer // nil: show nothing
	last string
}

func (c *command) progress() *progress {
	if *c.json || !c.e.terminal {
		return &progress{}
	}
	return &progress{w: c.e.stderr}
}

func (p *progress) show(line string) {
	if p.w == nil || line == p.last {
		return
	}
	p.last = line
	fmt.Fprintf(p.w, "\r\033[K%s", line)
}

func (p *progress) done() {
	if p.w != nil && p.last != "" {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

// claimAttempts counts the release attempts seen per claim: a claim
// whose step stays the same with a new LastError has been tried again.
type claimAttempts map[string]*claimSeen

type claimSeen struct {
	state, lastError string
	attempt          int
}

// releaseLine describes the claims still being released, with the
// step each is at and the attempt at it.
func releaseLine(alloc string, claims []api.AllocationClaim, seen claimAttempts) string {
	parts := make([]string, 0, len(claims))
	for _, ac := range claims {
		key := ac.Namespace + "/" + ac.VolumeID
		st, lastErr := "", ""
		if ac.Claim != nil {
			st, lastErr = ac.Claim.State.String(), ac.Claim.LastError
		}
		s := seen[key]
		switch {
		case s == nil || s.state != st:
			s = &claimSeen{state: st, lastError: lastErr, attempt: 1}
			seen[key] = s
		case lastErr != s.lastError:
			s.lastError = lastErr
			s.attempt++
		}
		part := fmt.Sprintf("%s %s (attempt %d", key, st, s.attempt)
		if lastErr != "" {
			part += ": " + lastErr
		}
		parts = append(parts, part+")")
	}
	sort.Strings(parts)
	return fmt.Sprintf("releasing %s: %s", alloc, strings.Join(parts, "; "))
}

// waitReleased waits, with blocking queries, until the allocation holds
// no claim, showing each claim's step on a terminal.
func (c *command) waitReleased(ctx context.Context, cl *api.Client, ns, alloc string) error {
	p := c.progress()
	defer p.done()
	seen := claimAttempts{}
	q := &api.QueryOptions{}
	for {
		claims, meta, err := cl.AllocationClaimsIn(ctx, ns, alloc, q)
		if err != nil {
			return err
		}
		if len(claims) == 0 {
			return nil
		}
		p.show(releaseLine(alloc, claims, seen))
		q.WaitIndex = meta.Index
	}
}

// ticking shows "what… Ns" on a terminal while a call runs, once a
// second, until stop is called; stop waits for it to end.
func (c *command) ticking(what string) (stop func()) {
	p := c.progress()
	if p.w == nil {
		return func() {}
	}
	quit, ended := make(chan struct{}), make(chan struct{})
	start := c.e.clock.Now()
	go func() {
		defer close(ended)
		for {
			t := c.e.clock.NewTimer(time.Second)
			select {
			case <-quit:
				t.Stop()
				p.done()
				return
			case <-t.C():
				p.show(fmt.Sprintf("%s %s", what, c.e.clock.Now().Sub(start).Round(time.Second)))
			}
		}
	}()
	return func() {
		close(quit)
		<-ended
	}
}
