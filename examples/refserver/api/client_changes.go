package api

import (
	"context"
	"net/http"

	"github.com/csikit/csikit/rpcshim"
)

// ExpandVolume grows a volume (POST /v1/volumes/{namespace}/{id}/expand,
// rpcshim.Server.ExpandVolume): the controller step, then the node step
// on every node where the volume is mounted. Nodes that could not be
// reached are in the response's PendingNodes; they complete the step
// when they report back.
func (c *Client) ExpandVolume(ctx context.Context, req *rpcshim.VolumeExpandRequest) (*rpcshim.VolumeChangeResponse, error) {
	var out rpcshim.VolumeChangeResponse
	if _, err := c.do(ctx, http.MethodPost, volumePath(req.Namespace, req.VolumeID)+"/expand", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ModifyVolume changes a volume's mutable parameters (POST
// /v1/volumes/{namespace}/{id}/modify, rpcshim.Server.ModifyVolume).
func (c *Client) ModifyVolume(ctx context.Context, req *rpcshim.VolumeModifyRequest) (*rpcshim.VolumeChangeResponse, error) {
	var out rpcshim.VolumeChangeResponse
	if _, err := c.do(ctx, http.MethodPost, volumePath(req.Namespace, req.VolumeID)+"/modify", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
