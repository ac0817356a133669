package plugin

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csikit/csikit/csi"
)

// ControllerModifier is the optional extension of ControllerClient for
// CSI 1.12's ControllerModifyVolume; *Client implements it. A layer that
// holds a ControllerClient finds it by type assertion, so fakes written
// before it keep compiling. The contract of ControllerClient applies.
type ControllerModifier interface {
	ControllerModifyVolume(ctx context.Context, r *ControllerModifyRequest) error
}

var _ ControllerModifier = (*Client)(nil)

// ControllerModifyRequest asks the controller to change a volume's
// mutable parameters (MODIFY_VOLUME).
type ControllerModifyRequest struct {
	ExternalID string
	// MutableParameters are the parameters to change. Required.
	MutableParameters map[string]string
	Secrets           csi.Secrets
}

// ControllerModifyVolume changes a volume's mutable parameters.
func (c *Client) ControllerModifyVolume(ctx context.Context, r *ControllerModifyRequest) error {
	if err := r.validate(); err != nil {
		return err
	}
	req := &csipb.ControllerModifyVolumeRequest{VolumeId: r.ExternalID, Secrets: r.Secrets, MutableParameters: r.MutableParameters}
	return c.call(ctx, csipb.Controller_ControllerModifyVolume_FullMethodName, r.Secrets, req, new(csipb.ControllerModifyVolumeResponse))
}

func (r *ControllerModifyRequest) validate() error {
	return validate("ControllerModifyVolume", r, func(c *check, r *ControllerModifyRequest) {
		c.id("ExternalID", r.ExternalID)
		if len(r.MutableParameters) == 0 {
			c.fail("MutableParameters", "is empty; name at least one parameter to change")
		}
	})
}
