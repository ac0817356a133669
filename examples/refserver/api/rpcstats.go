package api

import (
	"context"
	"net/http"
)

// RPCStat is how a plugin's calls of one CSI method went, as counted by
// the server's metrics (the count of metrics.PluginRPCLatency): the calls of the plugin
// clients that emit into the server's sink, such as the demo's agents.
type RPCStat struct {
	Method string
	Calls  int64
	// Errors are the calls that did not answer OK.
	Errors int64
}

// PluginRPC returns a plugin's call counts by method
// (GET /v1/plugins/{id}/rpc), sorted by method.
func (c *Client) PluginRPC(ctx context.Context, id string) ([]RPCStat, error) {
	var out []RPCStat
	_, err := c.do(ctx, http.MethodGet, "/v1/plugins/"+esc(id)+"/rpc", nil, nil, &out)
	return out, err
}
