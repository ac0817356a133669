package plugintest

import (
	"context"
	"path/filepath"
	"sync"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
)

// pluginLookup is what the node's plugin registry (fingerprint.Manager)
// offers the mounter and the node endpoint.
type pluginLookup interface {
	NodePlugin(pluginID string) (plugin.NodeClient, *csi.PluginInfo, error)
	ControllerPlugin(pluginID string) (plugin.ControllerClient, *csi.PluginInfo, error)
}

// call is one mutating CSI call the csikit stack made: its request
// exactly as sent (secrets included; it never leaves the process), its
// result and its error. The harness repeats calls from here with
// identical arguments and checks their order.
type call struct {
	Method string
	Req    any // *plugin.…Request
	// Result is the publish context of ControllerPublishVolume and the
	// *plugin.Volume of CreateVolume; nil otherwise.
	Result any
	Err    error
}

// callLog records the calls the csikit stack makes to the plugin. It
// sits between the registry and its users, so it sees every request the
// mounter and the node endpoint send, without a proxy in the path.
type callLog struct {
	mu    sync.Mutex
	calls []call
}

func (l *callLog) add(method string, req, result any, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, call{Method: method, Req: req, Result: result, Err: err})
}

// truncate drops the calls logged at or after index from.
func (l *callLog) truncate(from int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if from < len(l.calls) {
		l.calls = l.calls[:from]
	}
}

// all returns a copy of the log.
func (l *callLog) all() []call {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]call(nil), l.calls...)
}

// len returns the number of calls logged.
func (l *callLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls)
}

// last returns the last call of method logged at or after index from
// whose request matches keep (nil keeps any).
func (l *callLog) last(from int, method string, keep func(req any) bool) (call, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.calls) - 1; i >= from && i >= 0; i-- {
		c := l.calls[i]
		if c.Method == method && (keep == nil || keep(c.Req)) {
			return c, true
		}
	}
	return call{}, false
}

// lastFailed returns the last failed call logged at or after index from.
func (l *callLog) lastFailed(from int) (call, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.calls) - 1; i >= from && i >= 0; i-- {
		if l.calls[i].Err != nil {
			return l.calls[i], true
		}
	}
	return call{}, false
}

// recordingPlugins wraps the registry so that every client it hands out
// logs its mutating calls.
type recordingPlugins struct {
	reg  pluginLookup
	log  *callLog
	made *madePaths
}

func (p recordingPlugins) NodePlugin(id string) (plugin.NodeClient, *csi.PluginInfo, error) {
	c, info, err := p.reg.NodePlugin(id)
	if err != nil || c == nil {
		return c, info, err
	}
	return &recordingNode{NodeClient: c, log: p.log, made: p.made}, info, nil
}

func (p recordingPlugins) ControllerPlugin(id string) (plugin.ControllerClient, *csi.PluginInfo, error) {
	c, info, err := p.reg.ControllerPlugin(id)
	if err != nil || c == nil {
		return c, info, err
	}
	return &recordingController{ControllerClient: c, log: p.log}, info, nil
}

// recordingNode logs the node calls that change state, and makes the
// directories a stage and a publish need where the plugin sees them.
type recordingNode struct {
	plugin.NodeClient
	log  *callLog
	made *madePaths
}

func (n *recordingNode) NodeStageVolume(ctx context.Context, r *plugin.NodeStageRequest) error {
	if err := n.made.make(ctx, r.StagingPath); err != nil {
		return err
	}
	err := n.NodeClient.NodeStageVolume(ctx, r)
	n.log.add(methodNodeStage, copyOf(r), nil, err)
	return err
}

func (n *recordingNode) NodeUnstageVolume(ctx context.Context, r *plugin.NodeUnstageRequest) error {
	err := n.NodeClient.NodeUnstageVolume(ctx, r)
	n.log.add(methodNodeUnstage, copyOf(r), nil, err)
	return err
}

func (n *recordingNode) NodePublishVolume(ctx context.Context, r *plugin.NodePublishRequest) error {
	// The target itself is the plugin's to make.
	if err := n.made.make(ctx, filepath.Dir(r.TargetPath)); err != nil {
		return err
	}
	err := n.NodeClient.NodePublishVolume(ctx, r)
	n.log.add(methodNodePublish, copyOf(r), nil, err)
	return err
}

func (n *recordingNode) NodeUnpublishVolume(ctx context.Context, r *plugin.NodeUnpublishRequest) error {
	err := n.NodeClient.NodeUnpublishVolume(ctx, r)
	n.log.add(methodNodeUnpublish, copyOf(r), nil, err)
	return err
}

// recordingController logs the controller calls that change state, and
// ValidateVolumeCapabilities, the one a registration makes.
type recordingController struct {
	plugin.ControllerClient
	log *callLog
}

func (c *recordingController) CreateVolume(ctx context.Context, r *plugin.CreateVolumeRequest) (*plugin.Volume, error) {
	v, err := c.ControllerClient.CreateVolume(ctx, r)
	var res any
	if v != nil {
		res = copyOf(v)
	}
	c.log.add(methodCreateVolume, copyOf(r), res, err)
	return v, err
}

func (c *recordingController) DeleteVolume(ctx context.Context, r *plugin.DeleteVolumeRequest) error {
	err := c.ControllerClient.DeleteVolume(ctx, r)
	c.log.add(methodDeleteVolume, copyOf(r), nil, err)
	return err
}

func (c *recordingController) ControllerPublishVolume(ctx context.Context, r *plugin.ControllerPublishRequest) (map[string]string, error) {
	pc, err := c.ControllerClient.ControllerPublishVolume(ctx, r)
	c.log.add(methodControllerPublish, copyOf(r), cloneMap(pc), err)
	return pc, err
}

func (c *recordingController) ControllerUnpublishVolume(ctx context.Context, r *plugin.ControllerUnpublishRequest) error {
	err := c.ControllerClient.ControllerUnpublishVolume(ctx, r)
	c.log.add(methodControllerUnpublish, copyOf(r), nil, err)
	return err
}

func (c *recordingController) ValidateVolumeCapabilities(ctx context.Context, r *plugin.ValidateCapabilitiesRequest) (*plugin.ValidateCapabilitiesResponse, error) {
	resp, err := c.ControllerClient.ValidateVolumeCapabilities(ctx, r)
	c.log.add(methodValidate, copyOf(r), nil, err)
	return resp, err
}

// copyOf returns a shallow copy of *p: the csikit stack does not change
// a request's maps after sending it, so sharing them is safe.
func copyOf[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// The CSI method names the harness reports.
const (
	methodGetPluginInfo       = "GetPluginInfo"
	methodGetPluginCaps       = "GetPluginCapabilities"
	methodProbe               = "Probe"
	methodNodeGetInfo         = "NodeGetInfo"
	methodCreateVolume        = "CreateVolume"
	methodDeleteVolume        = "DeleteVolume"
	methodControllerPublish   = "ControllerPublishVolume"
	methodControllerUnpublish = "ControllerUnpublishVolume"
	methodValidate            = "ValidateVolumeCapabilities"
	methodNodeStage           = "NodeStageVolume"
	methodNodeUnstage         = "NodeUnstageVolume"
	methodNodePublish         = "NodePublishVolume"
	methodNodeUnpublish       = "NodeUnpublishVolume"
)
