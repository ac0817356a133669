package plugintest_test

import (
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/plugintest"
)

// The fake plugin in every shape a CO meets: with and without
// ControllerPublish and staging, creating volumes or handed a
// pre-provisioned one, as one process or split into a controller and a
// node. A well-behaved plugin passes every check.
func TestRun_Fake(t *testing.T) {
	type shape struct {
		name    string
		split   bool // separate controller and node fakes
		create  bool // CREATE_DELETE_VOLUME; otherwise a pre-provisioned volume
		ctrl    bool // a controller at all (false: node-only)
		publish bool
		stage   bool
		capab   csi.Capability
	}
	var shapes []shape
	for _, split := range []bool{false, true} {
		for _, publish := range []bool{false, true} {
			for _, stage := range []bool{false, true} {
				name := "monolith"
				if split {
					name = "split"
				}
				shapes = append(shapes, shape{name: name + caps(publish, stage), split: split, create: true, ctrl: true, publish: publish, stage: stage})
			}
		}
	}
	for _, stage := range []bool{false, true} {
		shapes = append(shapes, shape{name: "node-only/pre-provisioned" + caps(false, stage), stage: stage})
	}
	for _, publish := range []bool{false, true} {
		shapes = append(shapes, shape{name: "monolith/pre-provisioned" + caps(publish, true), ctrl: true, publish: publish, stage: true})
	}
	all := func(m csi.AccessMode, a csi.AttachmentMode) csi.Capability {
		return csi.Capability{AccessMode: m, AttachmentMode: a}
	}
	for _, c := range []csi.Capability{
		all(csi.AccessModeSingleNodeWriter, csi.AttachmentModeBlockDevice),
		all(csi.AccessModeSingleNodeSingleWriter, csi.AttachmentModeFileSystem),
		all(csi.AccessModeSingleNodeReaderOnly, csi.AttachmentModeFileSystem),
		all(csi.AccessModeMultiNodeMultiWriter, csi.AttachmentModeFileSystem),
	} {
		shapes = append(shapes, shape{name: "monolith/" + c.String() + caps(true, true), create: true, ctrl: true, publish: true, stage: true, capab: c})
	}

	for _, s := range shapes {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			ctrlCaps := csi.ControllerCapabilities{CreateDeleteVolume: s.create, PublishUnpublishVolume: s.publish}
			nodeCaps := csi.NodeCapabilities{StageUnstageVolume: s.stage}
			cfg := plugintest.Config{Capability: s.capab, DataCheck: plugintest.DataWriterOnly}
			var fakes []*csitest.Plugin
			controller := map[*csitest.Plugin]bool{}
			switch {
			case s.split:
				ctrl := csitest.Start(t, csitest.Config{Type: csi.PluginTypeController, Controller: ctrlCaps})
				node := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode, Node: nodeCaps})
				sharedBackEnd(ctrl, node)
				cfg.ControllerEndpoint, cfg.NodeEndpoint = ctrl.Endpoint(), node.Endpoint()
				fakes = append(fakes, ctrl, node)
				controller[ctrl] = true
			case s.ctrl:
				p := csitest.Start(t, csitest.Config{Controller: ctrlCaps, Node: nodeCaps})
				cfg.Endpoint = p.Endpoint()
				fakes = append(fakes, p)
				controller[p] = true
			default:
				p := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode, Node: nodeCaps})
				cfg.Endpoint = p.Endpoint()
				fakes = append(fakes, p)
			}
			if !s.create {
				cfg.VolumeID = "disk-0042"
				fakes[0].AddVolume(cfg.VolumeID, 1<<30, map[string]string{"pool": "a"})
				cfg.VolumeContext = map[string]string{"pool": "a"}
			}

			plugintest.Run(t, cfg)

			for _, p := range fakes {
				p.RequireNoViolations(t)
				requireClean(t, p, controller[p], cfg.VolumeID)
			}
			if !s.create {
				if _, ok := fakes[0].Volume(cfg.VolumeID); !ok {
					t.Errorf("the pre-provisioned volume %s was deleted", cfg.VolumeID)
				}
			}
		})
	}
}

func caps(publish, stage bool) string {
	s := ""
	if publish {
		s += "/controller-publish"
	}
	if stage {
		s += "/staging"
	}
	if s == "" {
		s = "/no-publish-no-staging"
	}
	return s
}

// The hostpath example plugin, a real plugin run in-process: with
// symbolic links as any user, with bind mounts as root.
func TestRun_Hostpath(t *testing.T) {
	methods := []hostpath.MountMethod{hostpath.MountSymlink, hostpath.MountBind}
	for _, m := range methods {
		for _, c := range []struct {
			name            string
			publish, stage  bool
			split, nodeOnly bool
		}{
			{name: "monolith", publish: true, stage: true},
			{name: "monolith-bare"},
			{name: "split", publish: true, stage: true, split: true},
			{name: "node-only", stage: true, nodeOnly: true},
		} {
			t.Run(string(m)+"/"+c.name, func(t *testing.T) {
				if m == hostpath.MountBind {
					bindMounts(t)
				}
				t.Parallel()
				base := hostpath.Config{DataDir: t.TempDir(), ControllerPublish: c.publish, Staging: c.stage, Mount: m}
				cfg := plugintest.Config{StrictUnstage: c.stage}
				switch {
				case c.split:
					ctrl, node := base, base
					ctrl.Mode, node.Mode = hostpath.ModeController, hostpath.ModeNode
					cfg.ControllerEndpoint, cfg.NodeEndpoint = startHostpath(t, ctrl), startHostpath(t, node)
				case c.nodeOnly:
					// A volume made by a controller that is gone: the node
					// plugin serves it as pre-provisioned.
					ctrl := base
					ctrl.Mode = hostpath.ModeController
					cfg.VolumeID = createHostpathVolume(t, startHostpath(t, ctrl))
					node := base
					node.Mode = hostpath.ModeNode
					cfg.Endpoint = startHostpath(t, node)
				default:
					cfg.Endpoint = startHostpath(t, base)
				}
				plugintest.Run(t, cfg)
			})
		}
	}
}
