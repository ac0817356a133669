package agent

import (
	"context"
	"path/filepath"
	"strings"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/examples/refserver/events"
	"github.com/csikit/csikit/fingerprint"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
)

// observedPlugins is the node's plugin lookup as the mounter and the
// node endpoint see it: the fingerprint manager's, with every mutating
// CSI call printed as a lifecycle line when it returns.
type observedPlugins struct {
	m    *fingerprint.Manager
	node string
	log  *events.Log
	root string // the mounter root, trimmed from printed paths
}

var (
	_ mounter.Plugins           = (*observedPlugins)(nil)
	_ rpcshim.ControllerPlugins = (*observedPlugins)(nil)
)

func (o *observedPlugins) NodePlugin(id string) (plugin.NodeClient, *csi.PluginInfo, error) {
	c, info, err := o.m.NodePlugin(id)
	if err != nil || o.log == nil {
		return c, info, err
	}
	return &observedNode{NodeClient: c, o: o}, info, nil
}

func (o *observedPlugins) ControllerPlugin(id string) (plugin.ControllerClient, *csi.PluginInfo, error) {
	c, info, err := o.m.ControllerPlugin(id)
	if err != nil || o.log == nil {
		return c, info, err
	}
	return &observedController{ControllerClient: c, o: o}, info, nil
}

func (o *observedPlugins) print(method, detail string, err error) {
	if err != nil {
		// Plugin errors reach us scrubbed of the request's secrets
		// (csi/plugin's contract).
		o.log.Printf(o.node, "%s failed: %s: %v", method, detail, err)
		return
	}
	o.log.Printf(o.node, "%s ok: %s", method, detail)
}

// rel shortens a path under the mounter root for printing.
func (o *observedPlugins) rel(p string) string {
	if r, err := filepath.Rel(o.root, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}

type observedNode struct {
	plugin.NodeClient
	o *observedPlugins
}

func (n *observedNode) NodeStageVolume(ctx context.Context, r *plugin.NodeStageRequest) error {
	err := n.NodeClient.NodeStageVolume(ctx, r)
	n.o.print("NodeStageVolume", r.ExternalID+" at "+n.o.rel(r.StagingPath), err)
	return err
}

func (n *observedNode) NodePublishVolume(ctx context.Context, r *plugin.NodePublishRequest) error {
	err := n.NodeClient.NodePublishVolume(ctx, r)
	ro := ""
	if r.ReadOnly {
		ro = " (read-only)"
	}
	n.o.print("NodePublishVolume", r.ExternalID+" at "+n.o.rel(r.TargetPath)+ro, err)
	return err
}

func (n *observedNode) NodeUnpublishVolume(ctx context.Context, r *plugin.NodeUnpublishRequest) error {
	err := n.NodeClient.NodeUnpublishVolume(ctx, r)
	n.o.print("NodeUnpublishVolume", r.ExternalID+" at "+n.o.rel(r.TargetPath), err)
	return err
}

func (n *observedNode) NodeUnstageVolume(ctx context.Context, r *plugin.NodeUnstageRequest) error {
	err := n.NodeClient.NodeUnstageVolume(ctx, r)
	n.o.print("NodeUnstageVolume", r.ExternalID+" at "+n.o.rel(r.StagingPath), err)
	return err
}

type observedController struct {
	plugin.ControllerClient
	o *observedPlugins
}

func (c *observedController) CreateVolume(ctx context.Context, r *plugin.CreateVolumeRequest) (*plugin.Volume, error) {
	v, err := c.ControllerClient.CreateVolume(ctx, r)
	detail := "name " + r.Name
	if err == nil {
		detail += " → " + v.ExternalID
	}
	c.o.print("CreateVolume", detail, err)
	return v, err
}

func (c *observedController) DeleteVolume(ctx context.Context, r *plugin.DeleteVolumeRequest) error {
	err := c.ControllerClient.DeleteVolume(ctx, r)
	c.o.print("DeleteVolume", r.ExternalID, err)
	return err
}

func (c *observedController) ControllerPublishVolume(ctx context.Context, r *plugin.ControllerPublishRequest) (map[string]string, error) {
	pc, err := c.ControllerClient.ControllerPublishVolume(ctx, r)
	c.o.print("ControllerPublishVolume", r.ExternalID+" to "+r.ExternalNodeID, err)
	return pc, err
}

func (c *observedController) ControllerUnpublishVolume(ctx context.Context, r *plugin.ControllerUnpublishRequest) error {
	err := c.ControllerClient.ControllerUnpublishVolume(ctx, r)
	c.o.print("ControllerUnpublishVolume", r.ExternalID+" from "+r.ExternalNodeID, err)
	return err
}
