package statetest

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

func (s suite) volumes(t *testing.T) {
	t.Run("RegisterAndRead", func(t *testing.T) {
		w := s.standard(t)
		v := w.volume(t, nsDefault, "data")
		want := volume(nsDefault, "data", pluginEBS, fsSNW)
		if v.ExternalID != want.ExternalID || v.PluginID != pluginEBS || v.Name != "data" ||
			!reflect.DeepEqual(v.Capabilities, want.Capabilities) || !reflect.DeepEqual(v.Parameters, want.Parameters) ||
			!reflect.DeepEqual(v.Context, want.Context) || v.Secrets["key"] != "s3cret" {
			t.Errorf("Volume(default, data) = %s, want the registered fields of %s", toJSON(v), toJSON(want))
		}
		if v.Provider != provider {
			t.Errorf("Provider = %q, want the plugin's %q", v.Provider, provider)
		}
		if !v.ControllerRequired || !v.Schedulable || v.ControllersHealthy != 1 || v.ControllersExpected != 1 ||
			v.NodesHealthy != 2 || v.NodesExpected != 2 {
			t.Errorf("denormalized plugin fields = required %t schedulable %t controllers %d/%d nodes %d/%d, want true true 1/1 2/2",
				v.ControllerRequired, v.Schedulable, v.ControllersHealthy, v.ControllersExpected, v.NodesHealthy, v.NodesExpected)
		}
		if v.CreateIndex == 0 || v.CreateIndex != v.ModifyIndex {
			t.Errorf("CreateIndex %d ModifyIndex %d, want equal and non-zero", v.CreateIndex, v.ModifyIndex)
		}
		if idx := w.index(t, state.TableVolumes); idx != w.idx {
			t.Errorf("Index(volumes) = %d, want the last write's %d", idx, w.idx)
		}
	})

	t.Run("ReadReturnsCopy", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)))
		before := w.dump(t)
		v := w.volume(t, nsDefault, "data")
		v.Name = "changed"
		v.Capabilities[0].AccessMode = csi.AccessModeMultiNodeMultiWriter
		v.Parameters["type"] = "changed"
		v.Secrets["key"] = "changed"
		v.WriteClaims["web-1"].NodeID = "n9"
		v.WriteClaims["intruder"] = &csi.Claim{AllocationID: "intruder"}
		vols, err := w.s.Volumes(nsDefault, "")
		if err != nil {
			t.Fatalf("Volumes: %v", err)
		}
		vols[0].ID = "changed"
		for _, list := range []func() ([]*csi.Volume, error){
			func() ([]*csi.Volume, error) { return w.s.VolumesByNode("n1") },
			func() ([]*csi.Volume, error) { return w.s.VolumesByPlugin(pluginEBS) },
		} {
			vols, err := list()
			if err != nil || len(vols) == 0 {
				t.Fatalf("list: %v, %d volumes", err, len(vols))
			}
			vols[0].WriteClaims = nil
			vols[0].Context["origin"] = "changed"
		}
		if after := w.dump(t); after != before {
			t.Errorf("changing returned volumes changed the store:\nbefore: %s\nafter:  %s", before, after)
		}
	})

	t.Run("UpdateKeepsClaimsAndCreateIndex", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, claimCmd(nsDefault, "shared", claim("web-1", "n1", csi.ClaimWrite, fsMNMW)))
		old := w.volume(t, nsDefault, "shared")
		upd := volume(nsDefault, "shared", pluginEBS, fsMNMW, fsSNW)
		upd.Parameters = map[string]string{"type": "io2"}
		upd.WriteClaims = nil // ignored: claims change only through claim commands
		res := w.must(t, state.RegisterVolume{Volume: upd})
		if !res.Changed {
			t.Errorf("update: Changed = false")
		}
		v := w.volume(t, nsDefault, "shared")
		if v.CreateIndex != old.CreateIndex || v.ModifyIndex != w.idx {
			t.Errorf("indexes after update = %d/%d, want %d/%d", v.CreateIndex, v.ModifyIndex, old.CreateIndex, w.idx)
		}
		if v.Parameters["type"] != "io2" || len(v.Capabilities) != 2 {
			t.Errorf("update not applied: %s", toJSON(v))
		}
		if v.WriteClaims["web-1"] == nil {
			t.Errorf("update dropped the claim of web-1: %s", toJSON(v))
		}
	})

	t.Run("UnchangedUpdateIsNoop", func(t *testing.T) {
		w := s.standard(t)
		w.noop(t, state.RegisterVolume{Volume: volume(nsDefault, "data", pluginEBS, fsSNW)})
	})

	t.Run("RefusedUpdates", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)))
		ext := volume(nsDefault, "data", pluginEBS, fsSNW)
		ext.ExternalID = "vol-elsewhere"
		prov := volume(nsDefault, "data", pluginEBS, fsSNW)
		prov.Provider = "other.csi.example.com"
		plug := volume(nsDefault, "data", "nfs", fsSNW)
		for _, tc := range []struct {
			name string
			vol  csi.Volume
			want error
		}{
			{"ExternalID", ext, csi.ErrVolumeExists},
			{"Provider", prov, csi.ErrVolumeExists},
			{"PluginID", plug, csi.ErrVolumeExists},
			{"CapabilityInUse", volume(nsDefault, "data", pluginEBS, fsMNMW), csi.ErrVolumeInUse},
		} {
			t.Run(tc.name, func(t *testing.T) {
				w.refuse(t, state.RegisterVolume{Volume: tc.vol}, tc.want, "data")
			})
		}
	})

	t.Run("InvalidRegistrations", func(t *testing.T) {
		w := s.standard(t)
		mk := func(f func(v *csi.Volume)) csi.Volume {
			v := volume(nsDefault, "new", pluginEBS, fsSNW)
			f(&v)
			return v
		}
		for _, tc := range []struct {
			name string
			vol  csi.Volume
			want error
		}{
			{"BadNamespace", mk(func(v *csi.Volume) { v.Namespace = "../etc" }), csi.ErrInvalidID},
			{"EmptyID", mk(func(v *csi.Volume) { v.ID = "" }), csi.ErrInvalidID},
			{"BadID", mk(func(v *csi.Volume) { v.ID = "a/b" }), csi.ErrInvalidID},
			{"BadPluginID", mk(func(v *csi.Volume) { v.PluginID = ".." }), csi.ErrInvalidID},
			{"EmptyExternalID", mk(func(v *csi.Volume) { v.ExternalID = "" }), csi.ErrInvalidID},
			{"ControlCharExternalID", mk(func(v *csi.Volume) { v.ExternalID = "vol\x1b[2J" }), csi.ErrInvalidID},
			{"SourceBoth", mk(func(v *csi.Volume) { v.Source = &csi.ContentSource{SnapshotID: "snap-1", VolumeID: "vol-1"} }), csi.ErrInvalidRequest},
			{"SourceBadID", mk(func(v *csi.Volume) { v.Source = &csi.ContentSource{SnapshotID: "snap\x00"} }), csi.ErrInvalidID},
			{"NoCapability", mk(func(v *csi.Volume) { v.Capabilities = nil }), csi.ErrInvalidRequest},
			{"BadCapability", mk(func(v *csi.Volume) { v.Capabilities = []csi.Capability{{AccessMode: 99}} }), csi.ErrInvalidRequest},
			{"UnknownPlugin", mk(func(v *csi.Volume) { v.PluginID = "nfs" }), csi.ErrPluginNotFound},
			{"ProviderMismatch", mk(func(v *csi.Volume) { v.Provider = "other.csi.example.com" }), csi.ErrInvalidRequest},
		} {
			t.Run(tc.name, func(t *testing.T) {
				w.refuse(t, state.RegisterVolume{Volume: tc.vol}, tc.want)
			})
		}
	})

	t.Run("Deregister", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)))
		w.refuse(t, state.DeregisterVolume{Namespace: nsDefault, VolumeID: "data"}, csi.ErrVolumeInUse, "data", "web-1")
		w.refuse(t, state.DeregisterVolume{Namespace: nsDefault, VolumeID: "missing"}, csi.ErrVolumeNotFound, "missing")
		w.refuse(t, state.DeregisterVolume{Namespace: "", VolumeID: "data"}, csi.ErrInvalidID)
		w.must(t, state.DeregisterVolume{Namespace: nsDefault, VolumeID: "shared"})
		w.must(t, state.DeregisterVolume{Namespace: nsDefault, VolumeID: "data", Force: true})
		for _, id := range []string{"data", "shared"} {
			if _, err := w.s.Volume(nsDefault, id); !errors.Is(err, csi.ErrVolumeNotFound) {
				t.Errorf("Volume(default, %s) after deregister: %v, want ErrVolumeNotFound", id, err)
			}
		}
		if v := w.volume(t, nsOther, "data"); v == nil {
			t.Errorf("deregistering default/data removed other/data")
		}
		vols, err := w.s.VolumesByNode("n1")
		if err != nil || len(vols) != 0 {
			t.Errorf("VolumesByNode(n1) after forced deregister = %v, %v; want none", volumeIDs(vols), err)
		}
	})

	t.Run("Lists", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, state.RegisterVolume{Volume: volume(nsDefault, "data-2", pluginEBS, fsSNW)})
		w.must(t, claimCmd(nsDefault, "shared", claim("web-2", "n2", csi.ClaimRead, fsMNMW)))
		w.must(t, claimCmd(nsDefault, "logs", claim("web-1", "n1", csi.ClaimRead, fsMNR)))
		w.must(t, claimCmd(nsDefault, "shared", claim("web-3", "n1", csi.ClaimWrite, fsMNMW)))
		for _, tc := range []struct {
			name string
			list func() ([]*csi.Volume, error)
			want []string
		}{
			{"All", func() ([]*csi.Volume, error) { return w.s.Volumes("", "") },
				[]string{"default/data", "default/data-2", "default/logs", "default/shared", "default/solo", "other/data"}},
			{"AllWithPrefix", func() ([]*csi.Volume, error) { return w.s.Volumes("", "data") },
				[]string{"default/data", "default/data-2", "other/data"}},
			{"Namespace", func() ([]*csi.Volume, error) { return w.s.Volumes(nsOther, "") }, []string{"other/data"}},
			{"NamespacePrefix", func() ([]*csi.Volume, error) { return w.s.Volumes(nsDefault, "data") },
				[]string{"default/data", "default/data-2"}},
			{"NoMatch", func() ([]*csi.Volume, error) { return w.s.Volumes(nsDefault, "zzz") }, nil},
			{"UnknownNamespace", func() ([]*csi.Volume, error) { return w.s.Volumes("nobody", "") }, nil},
			{"ByPlugin", func() ([]*csi.Volume, error) { return w.s.VolumesByPlugin(pluginEBS) },
				[]string{"default/data", "default/data-2", "default/logs", "default/shared", "default/solo", "other/data"}},
			{"ByUnknownPlugin", func() ([]*csi.Volume, error) { return w.s.VolumesByPlugin("nfs") }, nil},
			{"ByNode1", func() ([]*csi.Volume, error) { return w.s.VolumesByNode("n1") }, []string{"default/logs", "default/shared"}},
			{"ByNode2", func() ([]*csi.Volume, error) { return w.s.VolumesByNode("n2") }, []string{"default/shared"}},
			{"ByNode3", func() ([]*csi.Volume, error) { return w.s.VolumesByNode("n3") }, nil},
			{"WithPastClaims", func() ([]*csi.Volume, error) { return w.s.VolumesWithPastClaims() }, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				vols, err := tc.list()
				if err != nil {
					t.Fatalf("list: %v", err)
				}
				if got := volumeIDs(vols); !slices.Equal(got, tc.want) {
					t.Errorf("got %v, want %v", got, tc.want)
				}
			})
		}
	})

	t.Run("BadReads", func(t *testing.T) {
		w := s.standard(t)
		for _, tc := range []struct {
			name string
			read func() error
			want error
		}{
			{"VolumeMissing", func() error { _, err := w.s.Volume(nsDefault, "missing"); return err }, csi.ErrVolumeNotFound},
			{"VolumeOtherNamespace", func() error { _, err := w.s.Volume(nsOther, "shared"); return err }, csi.ErrVolumeNotFound},
			{"VolumeBadID", func() error { _, err := w.s.Volume(nsDefault, "../x"); return err }, csi.ErrInvalidID},
			{"VolumeBadNamespace", func() error { _, err := w.s.Volume("", "data"); return err }, csi.ErrInvalidID},
			{"VolumesBadNamespace", func() error { _, err := w.s.Volumes("a b", ""); return err }, csi.ErrInvalidID},
			{"ByPluginBadID", func() error { _, err := w.s.VolumesByPlugin(""); return err }, csi.ErrInvalidID},
			{"ByNodeBadID", func() error { _, err := w.s.VolumesByNode("n/1"); return err }, csi.ErrInvalidID},
			{"PluginMissing", func() error { _, err := w.s.Plugin("nfs"); return err }, csi.ErrPluginNotFound},
			{"PluginBadID", func() error { _, err := w.s.Plugin(".."); return err }, csi.ErrInvalidID},
			{"ControllersMissing", func() error { _, err := w.s.HealthyControllers("nfs"); return err }, csi.ErrPluginNotFound},
			{"NodeMissing", func() error { _, err := w.s.Node("n9"); return err }, csi.ErrNodeNotFound},
			{"NodeBadID", func() error { _, err := w.s.Node(""); return err }, csi.ErrInvalidID},
			{"AllocationMissing", func() error { _, err := w.s.Allocation("nobody"); return err }, csi.ErrAllocationNotFound},
			{"AllocationBadID", func() error { _, err := w.s.Allocation("a\x00"); return err }, csi.ErrInvalidID},
			{"AllocationsByNodeBadID", func() error { _, err := w.s.AllocationsByNode(""); return err }, csi.ErrInvalidID},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if err := tc.read(); !errors.Is(err, tc.want) {
					t.Errorf("error %v, want %v", err, tc.want)
				}
			})
		}
	})
}
