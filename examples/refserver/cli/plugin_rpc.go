package cli

import (
	"context"
	"fmt"

	"github.com/csikit/csikit/examples/refserver/api"
)

// printPluginRPC adds a plugin's call counts and error rates by method
// to plugin status, when the server counted any.
func (e *env) printPluginRPC(ctx context.Context, cl *api.Client, id string) {
	stats, err := cl.PluginRPC(ctx, id)
	if err != nil || len(stats) == 0 {
		return
	}
	fmt.Fprintln(e.stdout)
	t := newTable(e.stdout, "METHOD", "CALLS", "ERRORS", "ERROR RATE")
	for _, s := range stats {
		t.row(s.Method, s.Calls, s.Errors, errorRate(s))
	}
	t.flush()
}

func errorRate(s api.RPCStat) string {
	if s.Calls == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", float64(s.Errors)*100/float64(s.Calls))
}
