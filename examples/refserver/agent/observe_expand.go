package agent

import (
	"context"
	"fmt"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
)

// The observed clients pass on the optional plugin.ControllerModifier,
// which an embedded interface would hide, and print the expansions.
var _ plugin.ControllerModifier = (*observedController)(nil)

func (c *observedController) ControllerModifyVolume(ctx context.Context, r *plugin.ControllerModifyRequest) error {
	m, ok := c.ControllerClient.(plugin.ControllerModifier)
	if !ok {
		return fmt.Errorf("%w: this plugin client has no ControllerModifyVolume", csi.ErrNotSupported)
	}
	err := m.ControllerModifyVolume(ctx, r)
	c.o.print("ControllerModifyVolume", r.ExternalID, err)
	return err
}

func (c *observedController) ControllerExpandVolume(ctx context.Context, r *plugin.ControllerExpandRequest) (*plugin.ControllerExpandResponse, error) {
	resp, err := c.ControllerClient.ControllerExpandVolume(ctx, r)
	detail := fmt.Sprintf("%s to %d bytes", r.ExternalID, r.CapacityMin)
	if err == nil && resp.NodeExpansionRequired {
		detail += ", node expansion required"
	}
	c.o.print("ControllerExpandVolume", detail, err)
	return resp, err
}

func (n *observedNode) NodeExpandVolume(ctx context.Context, r *plugin.NodeExpandRequest) (int64, error) {
	size, err := n.NodeClient.NodeExpandVolume(ctx, r)
	n.o.print("NodeExpandVolume", fmt.Sprintf("%s at %s to %d bytes", r.ExternalID, n.o.rel(r.VolumePath), r.CapacityMin), err)
	return size, err
}
