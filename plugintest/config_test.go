package plugintest_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/plugintest"
)

func TestCheck_BadConfig(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  plugintest.Config
		want string
		is   error
	}{
		{"no endpoint", plugintest.Config{}, "no endpoint", csi.ErrInvalidRequest},
		{"both kinds of endpoint", plugintest.Config{Endpoint: "/a.sock", NodeEndpoint: "/b.sock"}, "both set", csi.ErrInvalidRequest},
		{"half a split plugin", plugintest.Config{ControllerEndpoint: "/a.sock"}, "needs both", csi.ErrInvalidRequest},
		{"tcp endpoint", plugintest.Config{Endpoint: "tcp://127.0.0.1:1"}, "not a unix socket", csi.ErrInvalidRequest},
		{"relative socket", plugintest.Config{Endpoint: "csi.sock"}, "not an absolute socket path", csi.ErrInvalidRequest},
		{"long volume ID", plugintest.Config{Endpoint: "/a.sock", VolumeID: strings.Repeat("x", 200)}, "Config.VolumeID", csi.ErrInvalidID},
		{"undefined access mode", plugintest.Config{Endpoint: "/a.sock", Capability: csi.Capability{AccessMode: 42, AttachmentMode: csi.AttachmentModeFileSystem}}, "Config.Capability", csi.ErrInvalidRequest},
		{"mount options on a block device", plugintest.Config{Endpoint: "/a.sock",
			Capability:   csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeBlockDevice},
			MountOptions: &csi.MountOptions{FSType: "ext4"}}, "block device", csi.ErrInvalidRequest},
		{"negative capacity", plugintest.Config{Endpoint: "/a.sock", CapacityBytes: -1}, "CapacityBytes", csi.ErrInvalidRequest},
		{"relative mount root", plugintest.Config{Endpoint: "/a.sock", MountRoot: "mnt", StateDir: "/s"}, "MountRoot", csi.ErrInvalidRequest},
		{"negative timeout", plugintest.Config{Endpoint: "/a.sock", Timeout: -1}, "Timeout", csi.ErrInvalidRequest},
		{"unknown data check", plugintest.Config{Endpoint: "/a.sock", DataCheck: 7}, "DataCheck", csi.ErrInvalidRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &plugintest.Recorder{}
			err := plugintest.Check(t.Context(), c.cfg, r)
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Check = %v; want an error matching %v that says %q", err, c.is, c.want)
			}
			if len(r.Steps()) != 0 {
				t.Errorf("a bad config ran steps: %v", r.Steps())
			}
		})
	}
}

func TestCheck_NilReporter(t *testing.T) {
	if err := plugintest.Check(t.Context(), plugintest.Config{Endpoint: "/a.sock"}, nil); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Fatalf("Check with a nil Reporter = %v", err)
	}
}

func TestParseDataCheck_RoundTrip(t *testing.T) {
	for _, d := range []plugintest.DataCheck{plugintest.DataShared, plugintest.DataWriterOnly, plugintest.DataOff} {
		got, err := plugintest.ParseDataCheck(d.String())
		if err != nil || got != d {
			t.Errorf("ParseDataCheck(%q) = %v, %v", d, got, err)
		}
	}
	if _, err := plugintest.ParseDataCheck("sometimes"); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Errorf("ParseDataCheck(sometimes) = %v", err)
	}
}

// A plugin that cannot create volumes needs Config.VolumeID: the run
// says so and stops after the fingerprint.
func TestCheck_NeedsVolumeID(t *testing.T) {
	for _, c := range []struct {
		name string
		fake csitest.Config
		want string
	}{
		{"node-only", csitest.Config{Type: csi.PluginTypeNode},
			`step "fingerprint": the plugin serves no controller; a node-only plugin cannot create volumes, so the harness needs a pre-provisioned one: set Config.VolumeID`},
		{"no CREATE_DELETE_VOLUME", csitest.Config{Controller: csi.ControllerCapabilities{PublishUnpublishVolume: true}},
			`step "fingerprint": the controller does not advertise CREATE_DELETE_VOLUME; the harness needs a pre-provisioned volume: set Config.VolumeID`},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := csitest.Start(t, c.fake)
			r := check(t, plugintest.Config{Endpoint: p.Endpoint()})
			requireOneFailure(t, r, c.want)
			if n := p.CallCount(csitest.MethodNodeStageVolume) + p.CallCount(csitest.MethodNodePublishVolume); n != 0 {
				t.Errorf("%d node calls without a volume", n)
			}
		})
	}
}
