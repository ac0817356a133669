package plugin_test

import (
	"errors"
	"maps"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
)

func TestClient_ControllerModifyVolume(t *testing.T) {
	ctrl := allController
	ctrl.ModifyVolume = true
	p := csitest.Start(t, csitest.Config{Controller: ctrl})
	p.AddVolume("ext-m", 1<<20, nil)
	c := newClient(t, p.Endpoint(), nil)
	ctx := t.Context()

	err := c.ControllerModifyVolume(ctx, &plugin.ControllerModifyRequest{ExternalID: "ext-m", MutableParameters: map[string]string{"iops": "3000"}})
	noErr(t, err, "ControllerModifyVolume")
	st, ok := p.Volume("ext-m")
	if !ok || !maps.Equal(st.MutableParameters, map[string]string{"iops": "3000"}) {
		t.Errorf("fake's mutable parameters = %v", st.MutableParameters)
	}

	calls := p.CallCount(csitest.MethodControllerModifyVolume)
	for _, r := range []*plugin.ControllerModifyRequest{nil, {ExternalID: "ext-m"}, {MutableParameters: map[string]string{"a": "b"}}} {
		if err := c.ControllerModifyVolume(ctx, r); !errors.Is(err, csi.ErrInvalidRequest) {
			t.Errorf("ControllerModifyVolume(%+v) = %v, want ErrInvalidRequest", r, err)
		}
	}
	if got := p.CallCount(csitest.MethodControllerModifyVolume); got != calls {
		t.Errorf("invalid requests reached the plugin: %d calls, want %d", got, calls)
	}
	err = c.ControllerModifyVolume(ctx, &plugin.ControllerModifyRequest{ExternalID: "nope", MutableParameters: map[string]string{"a": "b"}})
	if csi.CodeOf(err) != csi.CodeNotFound {
		t.Errorf("modify of an unknown volume = %v, want NotFound", err)
	}
}
