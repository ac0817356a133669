package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
)

// DefaultAddress is where the server listens unless told otherwise.
const DefaultAddress = "http://127.0.0.1:7646"

// maxResponse bounds a response body the client reads.
const maxResponse = 16 << 20

// QueryOptions make a read a blocking query: it answers once the data's
// index is above WaitIndex, or after WaitTime. The zero value reads at
// once.
type QueryOptions struct {
	WaitIndex uint64
	WaitTime  time.Duration
}

// QueryMeta is what a read reports besides its data.
type QueryMeta struct {
	// Index is the store index of the data; pass it as WaitIndex to
	// wait for the next change.
	Index uint64
}

// Client calls a refserver server's API. It is safe for concurrent use.
type Client struct {
	base *url.URL
	hc   *http.Client
	// nodeSecret, if set, is sent in NodeSecretHeader.
	nodeSecret string
	// clusterToken, if set, is sent in ClusterTokenHeader.
	clusterToken string
	// token, if set, is sent in TokenHeader.
	token string
}

// TokenEnv is the environment variable the refserver CLI reads a
// caller's ACL token from when -token is not given.
const TokenEnv = "CSIKIT_TOKEN"

// TokenHeader carries a caller's ACL token.
const TokenHeader = "X-Refserver-Token"

// WithToken returns a client that sends the ACL token with every
// request (TokenHeader). It shares c's connections.
func (c *Client) WithToken(token string) *Client {
	n := *c
	n.token = token
	return &n
}

// ClusterTokenHeader carries the cluster token from one server to
// another (the internal endpoints under InternalPrefix).
const ClusterTokenHeader = "X-Refserver-Cluster-Token"

// WithClusterToken returns a client that sends token with every
// request (ClusterTokenHeader): the client a server uses to reach the
// other servers of its cluster. It shares c's connections.
func (c *Client) WithClusterToken(token string) *Client {
	n := *c
	n.clusterToken = token
	return &n
}

// NodeSecretHeader carries a node agent's secret with its node calls
// (register, heartbeat, leave, plugin reports). The server keeps only
// its hash (state.HashNodeSecret).
const NodeSecretHeader = "X-Refserver-Node-Secret"

// WithNodeSecret returns a client that sends secret with every request
// (NodeSecretHeader): the client a node agent uses. It shares c's
// connections.
func (c *Client) WithNodeSecret(secret string) *Client {
	n := *c
	n.nodeSecret = secret
	return &n
}

// NewClient returns a client of the server at address ("http://host:port"
// or "host:port"). A nil hc means a client of its own, without a global
// timeout: blocking queries wait as long as their ctx allows.
func NewClient(address string, hc *http.Client) (*Client, error) {
	if address == "" {
		address = DefaultAddress
	}
	if !strings.Contains(address, "://") {
		address = "http://" + address
	}
	u, err := url.Parse(address)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("%w: server address %q is not http://host:port", csi.ErrInvalidRequest, address)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if hc == nil {
		hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	return &Client{base: u, hc: hc}, nil
}

// Address returns the server's base URL.
func (c *Client) Address() string { return c.base.String() }

// Close releases the client's idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// do sends one request. in, if not nil, is sent as JSON; out, if not
// nil, receives the JSON reply.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) (*QueryMeta, error) {
	u := *c.base
	u.Path += path
	u.RawQuery = query.Encode()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("%w: encode %s %s: %v", csi.ErrInvalidRequest, method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %v", csi.ErrInvalidRequest, method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.nodeSecret != "" {
		req.Header.Set(NodeSecretHeader, c.nodeSecret)
	}
	if c.token != "" {
		req.Header.Set(TokenHeader, c.token)
	}
	if c.clusterToken != "" {
		req.Header.Set(ClusterTokenHeader, c.clusterToken)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s %s: %w", method, path, ctx.Err())
		}
		return nil, fmt.Errorf("%w: server %s: %w; is it running?", csi.ErrUnavailable, c.base.Host, err)
	}
	defer resp.Body.Close()
	meta := &QueryMeta{}
	if h := resp.Header.Get(IndexHeader); h != "" {
		meta.Index, _ = strconv.ParseUint(h, 10, 64)
	}
	dec := json.NewDecoder(io.LimitReader(resp.Body, maxResponse))
	if resp.StatusCode/100 != 2 {
		var eb ErrorResponse
		derr := dec.Decode(&eb)
		return meta, decodeError(method, path, resp.StatusCode, eb, derr)
	}
	if out != nil {
		if err := dec.Decode(out); err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%s %s: %w", method, path, ctx.Err())
			}
			return nil, fmt.Errorf("%w: %s %s: the reply does not decode: %v", csi.ErrUnavailable, method, path, err)
		}
	}
	return meta, nil
}

func blocking(q *QueryOptions) url.Values {
	v := url.Values{}
	if q != nil && (q.WaitIndex > 0 || q.WaitTime > 0) {
		v.Set("index", strconv.FormatUint(q.WaitIndex, 10))
		if q.WaitTime > 0 {
			v.Set("wait", q.WaitTime.String())
		}
	}
	return v
}

func esc(s string) string { return url.PathEscape(s) }

func volumePath(namespace, id string) string {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	return "/v1/volumes/" + esc(namespace) + "/" + esc(id)
}

// Volumes lists the volumes of namespace ("" for all) whose ID starts
// with prefix, secrets removed.
func (c *Client) Volumes(ctx context.Context, namespace, prefix string, q *QueryOptions) ([]*csi.Volume, *QueryMeta, error) {
	v := blocking(q)
	if namespace != "" {
		v.Set("namespace", namespace)
	}
	if prefix != "" {
		v.Set("prefix", prefix)
	}
	var out []*csi.Volume
	meta, err := c.do(ctx, http.MethodGet, "/v1/volumes", v, nil, &out)
	return out, meta, err
}

// Volume reads one volume, secrets removed.
func (c *Client) Volume(ctx context.Context, namespace, id string, q *QueryOptions) (*csi.Volume, *QueryMeta, error) {
	var out csi.Volume
	meta, err := c.do(ctx, http.MethodGet, volumePath(namespace, id), blocking(q), nil, &out)
	if err != nil {
		return nil, meta, err
	}
	return &out, meta, nil
}

// RegisterVolume registers an existing volume (or updates it).
func (c *Client) RegisterVolume(ctx context.Context, req *rpcshim.VolumeRegisterRequest) (*rpcshim.VolumeResponse, error) {
	var out rpcshim.VolumeResponse
	_, err := c.do(ctx, http.MethodPut, volumePath(req.Volume.Namespace, req.Volume.ID), nil, req, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateVolume creates a volume through its plugin's controller and
// registers it.
func (c *Client) CreateVolume(ctx context.Context, req *rpcshim.VolumeCreateRequest) (*rpcshim.VolumeResponse, error) {
	var out rpcshim.VolumeResponse
	_, err := c.do(ctx, http.MethodPost, volumePath(req.Volume.Namespace, req.Volume.ID)+"/create", nil, req, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteVolume deletes a volume in its plugin and deregisters it.
func (c *Client) DeleteVolume(ctx context.Context, namespace, id string) (*WriteResponse, error) {
	var out WriteResponse
	if _, err := c.do(ctx, http.MethodDelete, volumePath(namespace, id), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeregisterVolume removes a volume without calling its plugin; force
// drops its claims too.
func (c *Client) DeregisterVolume(ctx context.Context, namespace, id string, force bool) (*WriteResponse, error) {
	v := url.Values{"deregister": {"true"}}
	if force {
		v.Set("force", "true")
	}
	var out WriteResponse
	if _, err := c.do(ctx, http.MethodDelete, volumePath(namespace, id), v, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Claim claims a volume for an allocation and, if req.Mount, mounts it
// on the allocation's node.
func (c *Client) Claim(ctx context.Context, namespace, volumeID string, req *ClaimRequest) (*ClaimResponse, error) {
	var out ClaimResponse
	if _, err := c.do(ctx, http.MethodPost, volumePath(namespace, volumeID)+"/claim", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Place asks which nodes can take a claim on a volume, and why not the
// others.
func (c *Client) Place(ctx context.Context, namespace, volumeID string, req *PlaceRequest) (*PlaceResponse, error) {
	var out PlaceResponse
	if _, err := c.do(ctx, http.MethodPost, volumePath(namespace, volumeID)+"/place", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Plugins lists every plugin.
func (c *Client) Plugins(ctx context.Context, q *QueryOptions) ([]*csi.Plugin, *QueryMeta, error) {
	var out []*csi.Plugin
	meta, err := c.do(ctx, http.MethodGet, "/v1/plugins", blocking(q), nil, &out)
	return out, meta, err
}

// Plugin reads one plugin with its instances.
func (c *Client) Plugin(ctx context.Context, id string, q *QueryOptions) (*csi.Plugin, *QueryMeta, error) {
	var out csi.Plugin
	meta, err := c.do(ctx, http.MethodGet, "/v1/plugins/"+esc(id), blocking(q), nil, &out)
	if err != nil {
		return nil, meta, err
	}
	return &out, meta, nil
}

// Release marks an allocation of DefaultNamespace terminal; the claim
// worker then releases its claims.
func (c *Client) Release(ctx context.Context, allocID string) (*ReleaseResponse, error) {
	return c.ReleaseIn(ctx, DefaultNamespace, allocID)
}

// ReleaseIn marks an allocation of namespace terminal ("" is
// DefaultNamespace). The server authorizes the namespace before it
// reads the allocation, so a caller without the permission learns
// nothing of it; an allocation of another namespace is not found.
func (c *Client) ReleaseIn(ctx context.Context, namespace, allocID string) (*ReleaseResponse, error) {
	var out ReleaseResponse
	v := url.Values{}
	if namespace != "" {
		v.Set("namespace", namespace)
	}
	if _, err := c.do(ctx, http.MethodPost, "/v1/allocations/"+esc(allocID)+"/release", v, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AllocationClaims lists the claims, live and past, of an allocation of
// DefaultNamespace.
func (c *Client) AllocationClaims(ctx context.Context, allocID string, q *QueryOptions) ([]AllocationClaim, *QueryMeta, error) {
	return c.AllocationClaimsIn(ctx, DefaultNamespace, allocID, q)
}

// AllocationClaimsIn lists the claims of an allocation of namespace (""
// is DefaultNamespace); as with ReleaseIn, one of another namespace is
// not found.
func (c *Client) AllocationClaimsIn(ctx context.Context, namespace, allocID string, q *QueryOptions) ([]AllocationClaim, *QueryMeta, error) {
	v := blocking(q)
	if namespace != "" {
		v.Set("namespace", namespace)
	}
	var out []AllocationClaim
	meta, err := c.do(ctx, http.MethodGet, "/v1/allocations/"+esc(allocID)+"/claims", v, nil, &out)
	return out, meta, err
}

// Nodes lists the nodes with their liveness and plugins.
func (c *Client) Nodes(ctx context.Context) ([]*Node, error) {
	var out []*Node
	_, err := c.do(ctx, http.MethodGet, "/v1/nodes", nil, nil, &out)
	return out, err
}

// RegisterNode registers a node agent, the gRPC target of its node
// service and its plugin instances.
func (c *Client) RegisterNode(ctx context.Context, nodeID string, req *RegisterNodeRequest) error {
	_, err := c.do(ctx, http.MethodPut, "/v1/nodes/"+esc(nodeID), nil, req, nil)
	return err
}

// Heartbeat keeps a node ready. An error matching csi.ErrNodeNotFound
// means the server does not know the node (it restarted): register again.
func (c *Client) Heartbeat(ctx context.Context, nodeID string) error {
	_, err := c.do(ctx, http.MethodPut, "/v1/nodes/"+esc(nodeID)+"/heartbeat", nil, nil, nil)
	return err
}

// Leave tells the server that the node's agent is stopping: the node is
// down at once instead of after the heartbeat TTL, until it registers
// again.
func (c *Client) Leave(ctx context.Context, nodeID string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/nodes/"+esc(nodeID)+"/heartbeat", nil, nil, nil)
	return err
}

// ReportPlugins sends a node's full list of plugin fingerprints.
func (c *Client) ReportPlugins(ctx context.Context, nodeID string, infos []*csi.PluginInfo) error {
	_, err := c.do(ctx, http.MethodPut, "/v1/nodes/"+esc(nodeID)+"/plugins", nil, &ReportPluginsRequest{Plugins: infos}, nil)
	return err
}

// WaitVolume blocks until the volume satisfies ok, or ctx ends. It uses
// blocking queries, so it makes one request per change of the volumes,
// not a poll.
func (c *Client) WaitVolume(ctx context.Context, namespace, id string, ok func(*csi.Volume) bool) (*csi.Volume, error) {
	q := &QueryOptions{}
	for {
		v, meta, err := c.Volume(ctx, namespace, id, q)
		if err != nil {
			return nil, err
		}
		if ok(v) {
			return v, nil
		}
		q.WaitIndex = meta.Index
	}
}

// WaitPlugin blocks until the plugin satisfies ok (ok receives nil while
// the plugin does not exist), or ctx ends, using blocking queries.
func (c *Client) WaitPlugin(ctx context.Context, id string, ok func(*csi.Plugin) bool) (*csi.Plugin, error) {
	q := &QueryOptions{}
	for {
		list, meta, err := c.Plugins(ctx, q)
		if err != nil {
			return nil, err
		}
		var p *csi.Plugin
		for _, x := range list {
			if x.ID == id {
				p = x
			}
		}
		if ok(p) {
			return p, nil
		}
		q.WaitIndex = meta.Index
	}
}

// WaitReleased blocks until the allocation, of DefaultNamespace, holds
// no claim, live or past: the claim worker has released and freed
// every one. It uses blocking queries.
func (c *Client) WaitReleased(ctx context.Context, allocID string) error {
	return c.WaitReleasedIn(ctx, DefaultNamespace, allocID)
}

// WaitReleasedIn is WaitReleased for an allocation of namespace.
func (c *Client) WaitReleasedIn(ctx context.Context, namespace, allocID string) error {
	q := &QueryOptions{}
	for {
		claims, meta, err := c.AllocationClaimsIn(ctx, namespace, allocID, q)
		if err != nil {
			return err
		}
		if len(claims) == 0 {
			return nil
		}
		q.WaitIndex = meta.Index
	}
}
