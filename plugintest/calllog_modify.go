package plugintest

import (
	"context"
	"fmt"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
)

// recordingController passes on the optional plugin.ControllerModifier,
// which its embedded interface would hide, so that the server's
// ModifyVolume reaches the plugin (step "modify volume").
var _ plugin.ControllerModifier = (*recordingController)(nil)

func (c *recordingController) ControllerModifyVolume(ctx context.Context, r *plugin.ControllerModifyRequest) error {
	m, ok := c.ControllerClient.(plugin.ControllerModifier)
	if !ok {
		return fmt.Errorf("%w: this plugin client has no ControllerModifyVolume", csi.ErrNotSupported)
	}
	err := m.ControllerModifyVolume(ctx, r)
	c.log.add(methodControllerModify, copyOf(r), nil, err)
	return err
}
