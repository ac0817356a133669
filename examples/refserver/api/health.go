package api

import (
	"context"
	"net/http"

	"github.com/csikit/csikit/state"
)

// Healths returns every volume health record (GET /v1/health).
func (c *Client) Healths(ctx context.Context) ([]*state.VolumeHealth, error) {
	var out []*state.VolumeHealth
	_, err := c.do(ctx, http.MethodGet, "/v1/health", nil, nil, &out)
	return out, err
}

// VolumeHealth returns a volume's health record, nil when it has none
// (GET /v1/volumes/{namespace}/{id}/health).
func (c *Client) VolumeHealth(ctx context.Context, namespace, id string) (*state.VolumeHealth, error) {
	var out *state.VolumeHealth
	_, err := c.do(ctx, http.MethodGet, volumePath(namespace, id)+"/health", nil, nil, &out)
	return out, err
}
