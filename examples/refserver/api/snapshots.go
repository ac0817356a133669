package api

import (
	"context"
	"net/http"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
)

// SnapshotCreateBody is the body of POST
// /v1/volumes/{namespace}/{id}/snapshots/{snapshot}: what the path does
// not say.
type SnapshotCreateBody struct {
	Parameters map[string]string `json:",omitempty"`
	// Secrets for CreateSnapshot and DeleteSnapshot; none means the
	// volume's.
	Secrets csi.Secrets `json:",omitempty"`
}

func snapshotPath(namespace, id string) string {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	return "/v1/snapshots/" + esc(namespace) + "/" + esc(id)
}

// CreateSnapshot snapshots volume volumeID of namespace as snapshotID
// and waits for the plugin to report it ready to use.
func (c *Client) CreateSnapshot(ctx context.Context, namespace, volumeID, snapshotID string, body *SnapshotCreateBody) (*rpcshim.SnapshotResponse, error) {
	if body == nil {
		body = &SnapshotCreateBody{}
	}
	var out rpcshim.SnapshotResponse
	if _, err := c.do(ctx, http.MethodPost, volumePath(namespace, volumeID)+"/snapshots/"+esc(snapshotID), nil, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteSnapshot deletes a snapshot in its plugin and forgets it.
func (c *Client) DeleteSnapshot(ctx context.Context, namespace, id string) (*WriteResponse, error) {
	var out WriteResponse
	if _, err := c.do(ctx, http.MethodDelete, snapshotPath(namespace, id), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Snapshot returns one snapshot, secrets removed.
func (c *Client) Snapshot(ctx context.Context, namespace, id string, q *QueryOptions) (*csi.Snapshot, *QueryMeta, error) {
	var out csi.Snapshot
	meta, err := c.do(ctx, http.MethodGet, snapshotPath(namespace, id), blocking(q), nil, &out)
	if err != nil {
		return nil, meta, err
	}
	return &out, meta, nil
}

// Snapshots lists the snapshots of namespace ("" for all), or with
// volumeID those of one source volume, secrets removed.
func (c *Client) Snapshots(ctx context.Context, namespace, volumeID string, q *QueryOptions) ([]*csi.Snapshot, *QueryMeta, error) {
	v := blocking(q)
	if namespace != "" {
		v.Set("namespace", namespace)
	}
	if volumeID != "" {
		v.Set("volume", volumeID)
	}
	var out []*csi.Snapshot
	meta, err := c.do(ctx, http.MethodGet, "/v1/snapshots", v, nil, &out)
	return out, meta, err
}
