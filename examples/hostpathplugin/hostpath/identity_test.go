package hostpath_test

import (
	"context"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
)

func TestPlugin_GetPluginCapabilities_ByMode(t *testing.T) {
	all := []string{"CONTROLLER_SERVICE", "ONLINE"}
	for _, tc := range []struct {
		name  string
		mode  hostpath.Mode
		split bool
		want  []string
	}{
		{"Monolith", hostpath.ModeMonolith, false, all},
		{"Controller", hostpath.ModeController, false, all},
		{"NodeOnly", hostpath.ModeNode, false, nil},
		// A split plugin's node half speaks for the whole plugin, as
		// csi-sanity's node tests (and Kubernetes) read it.
		{"SplitNode", hostpath.ModeNode, true, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, hostpath.Config{Mode: tc.mode, SplitNode: tc.split})
			r, err := h.ident.GetPluginCapabilities(context.Background(), &csipb.GetPluginCapabilitiesRequest{})
			must.NoError(t, err)
			var got []string
			for _, c := range r.GetCapabilities() {
				switch {
				case c.GetService() != nil:
					got = append(got, c.GetService().GetType().String())
				case c.GetVolumeExpansion() != nil:
					got = append(got, c.GetVolumeExpansion().GetType().String())
				}
			}
			must.Equal(t, tc.want, got)
			if tc.split {
				_, err := h.ctrl.ListVolumes(context.Background(), &csipb.ListVolumesRequest{})
				requireCode(t, codes.Unimplemented, err) // the node half serves no Controller call
			}
		})
	}
}
