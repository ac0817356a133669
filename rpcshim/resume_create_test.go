package rpcshim_test

import (
	"context"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/rpcshim"
)

// TestServer_ResumeVolumeChanges_Create: a create whose plugin call did
// not complete on the old leader leaves its intent; a new leader's
// ResumeVolumeChanges completes it from the intent alone, with the same
// CSI name, content source and mutable parameters, and a second resume
// calls nothing.
func TestServer_ResumeVolumeChanges_Create(t *testing.T) {
	for _, tc := range []struct {
		name string
		// lost is how the old leader's create ended: true when the
		// plugin made the volume and only the reply was lost.
		lost bool
	}{{"BeforeThePluginActed", false}, {"ReplyLost", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSnapEnv(t, snapCaps, csitest.Config{})
			e.register("db", "ext-db", snwFS)
			if _, err := e.snapshot(t, "s1", "db"); err != nil {
				t.Fatal(err)
			}
			snap, err := e.srv.Snapshot(context.Background(), "default", "s1")
			must(t, err)
			ctx := context.Background()
			req := &rpcshim.VolumeCreateRequest{
				From:              &rpcshim.VolumeSource{SnapshotID: "s1"},
				MutableParameters: map[string]string{"iops": "300"},
				Volume:            csi.Volume{ID: "restored", Namespace: "default", PluginID: rtPlugin, Capabilities: []csi.Capability{snwFS}},
			}
			e.ctl.FailNext(csitest.MethodCreateVolume, codes.DeadlineExceeded, 1)
			if _, err := e.srv.CreateVolume(ctx, req); csi.Classify(err) != csi.ClassUncertain {
				t.Fatalf("create on the old leader: %v, want an Uncertain error", err)
			}
			v, err := e.store.Volume("default", "restored")
			must(t, err)
			if !v.Creating || v.Source == nil || v.Source.SnapshotID != snap.ExternalID || v.MutableParameters["iops"] != "300" {
				t.Fatalf("intent %+v: want Creating with the snapshot source and the mutable parameters", v)
			}

			var made string // the external volume the old leader's call made
			if tc.lost {
				cr := &rpcshim.CreateVolumeRequest{CSIControllerQuery: rpcshim.CSIControllerQuery{PluginID: rtPlugin}}
				cr.Name, cr.Capabilities, cr.Source = "default/restored", []csi.Capability{snwFS}, v.Source
				resp, err := e.router.CreateVolume(ctx, cr)
				must(t, err)
				made = resp.Volume.ExternalID
			}

			srv, err := rpcshim.NewServer(rpcshim.ServerConfig{Store: e.store, Applier: e.applier, Router: e.router, Clock: e.clock})
			must(t, err)
			must(t, srv.ResumeVolumeChanges(ctx))
			v, err = e.store.Volume("default", "restored")
			must(t, err)
			if v.Creating || v.ExternalID == "" {
				t.Fatalf("after the resume: %+v, want a completed record", v)
			}
			if made != "" && v.ExternalID != made {
				t.Errorf("the record names external volume %q, not %q that the plugin made for the name", v.ExternalID, made)
			}
			if _, ok := e.ctl.Volume(v.ExternalID); !ok {
				t.Fatalf("the record names external volume %q, which the plugin does not have", v.ExternalID)
			}
			creates := e.ctl.CallsTo(csitest.MethodCreateVolume)
			last := creates[len(creates)-1].Request.(*csipb.CreateVolumeRequest)
			if last.GetName() != "default/restored" || last.GetVolumeContentSource().GetSnapshot().GetSnapshotId() != snap.ExternalID ||
				last.GetMutableParameters()["iops"] != "300" {
				t.Errorf("resumed CreateVolume %v: want the same name, source and mutable parameters", last)
			}
			n := e.ctl.CallCount(csitest.MethodCreateVolume)
			must(t, srv.ResumeVolumeChanges(ctx))
			expectEqual(t, e.ctl.CallCount(csitest.MethodCreateVolume), n)
			if vols := len(e.ctl.Volumes()); vols != 2 { // db and restored
				t.Errorf("the plugin holds %d volumes, want 2: a resumed create made another", vols)
			}
		})
	}
}
