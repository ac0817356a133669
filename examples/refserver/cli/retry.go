package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/backoff"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/examples/refserver/api"
)

// retryPolicy spaces the retries of a call the server refused as
// retryable: a leader election takes a second or two.
var retryPolicy = backoff.Policy{Base: 100 * time.Millisecond, Max: 2 * time.Second}

// retry runs call until it succeeds, fails for good, or ctx (bounded by
// -timeout) ends. A call is retried when the server answered that
// nothing was done and a retry may succeed: HTTP 503 (no leader known,
// the leader unreachable from the server that took the request), except
// for a node or plugin that is not ready.
// A server that does not answer at all is not retried: the address may be wrong, and "is it running?" says so at
// once. The first retry is said once on stderr; the error returned,
// when ctx ends first, is the last one the server gave.
func retry[T any](ctx context.Context, c *command, call func(context.Context) (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := call(ctx)
		if err == nil || !retryable(err) {
			return v, err
		}
		if attempt == 1 {
			fmt.Fprintf(c.e.stderr, "refserver %s: %v; retrying until -timeout (%s) ends\n", c.name, err, *c.timeout)
		}
		if serr := clock.Sleep(ctx, c.e.clock, retryPolicy.Delay(attempt)); serr != nil {
			return v, fmt.Errorf("%w (gave up after %d attempts: -timeout %s passed)", err, attempt, *c.timeout)
		}
	}
}

// retryable reports whether the server refused a call in a way a retry
// may fix by itself. A node or plugin that is not ready is left out,
// though the server answers it with 503 too: it waits for a person (an
// agent or a plugin to start), who is better told at once.
func retryable(err error) bool {
	var ae *api.Error
	switch {
	case !errors.As(err, &ae):
		return false
	case errors.Is(err, csi.ErrNodeNotReady), errors.Is(err, csi.ErrNoController), errors.Is(err, csi.ErrPluginUnhealthy):
		return false
	}
	// Only 503: other refusals of class Retryable (a plugin instance
	// not on that node yet: 404) wait for a change a person makes too.
	return ae.StatusCode == http.StatusServiceUnavailable
}
