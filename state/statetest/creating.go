package statetest

import (
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// creating checks creation intents: a volume registered with Creating
// and no external ID, which no claim may use, completed by a register
// with the plugin's external ID.
func (s suite) creating(t *testing.T) {
	w := s.standard(t)
	intent := volume(nsDefault, "new", pluginEBS, fsSNW)
	intent.ExternalID, intent.Creating = "", true
	w.must(t, state.RegisterVolume{Volume: intent})
	if v := w.volume(t, nsDefault, "new"); !v.Creating || v.ExternalID != "" {
		t.Fatalf("intent = %+v", v)
	}
	// A second intent of the same plugin has no external ID either.
	other := intent
	other.ID = "new-2"
	w.must(t, state.RegisterVolume{Volume: other})

	withID := intent
	withID.ExternalID = "vol-x"
	w.refuse(t, state.RegisterVolume{Volume: withID}, csi.ErrInvalidRequest, "being created")
	w.refuse(t, claimCmd(nsDefault, "new", claim("web-1", "n1", csi.ClaimWrite, fsSNW)), csi.ErrVolumeInUse, "being created")

	// Completing it with an external ID another volume holds is an alias.
	taken := volume(nsDefault, "new", pluginEBS, fsSNW)
	taken.ExternalID = volume(nsDefault, "data", pluginEBS, fsSNW).ExternalID
	w.refuse(t, state.RegisterVolume{Volume: taken}, csi.ErrVolumeExists)

	done := volume(nsDefault, "new", pluginEBS, fsSNW)
	done.ExternalID = "vol-created"
	w.must(t, state.RegisterVolume{Volume: done})
	if v := w.volume(t, nsDefault, "new"); v.Creating || v.ExternalID != "vol-created" {
		t.Fatalf("completed volume = %+v", v)
	}
	// A registered volume cannot go back to being created.
	w.refuse(t, state.RegisterVolume{Volume: intent}, csi.ErrVolumeExists, "not being created")
	w.must(t, claimCmd(nsDefault, "new", claim("web-1", "n1", csi.ClaimWrite, fsSNW)))
}

// deleting checks delete intents: Deleting, set on a registered volume
// with no claim before the plugin deletes it, refuses every claim until
// the volume is deregistered, and once withdrawn the volume is claimed
// again.
func (s suite) deleting(t *testing.T) {
	w := s.standard(t)
	marked := w.volume(t, nsDefault, "data")
	marked.Deleting = true
	w.must(t, state.RegisterVolume{Volume: *marked})
	if v := w.volume(t, nsDefault, "data"); !v.Deleting {
		t.Fatalf("intent = %+v, want Deleting", v)
	}
	w.refuse(t, claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)), csi.ErrVolumeInUse, "being deleted")

	// An intent is only for a registered volume, and not for one being
	// created.
	fresh := volume(nsDefault, "fresh", pluginEBS, fsSNW)
	fresh.Deleting = true
	w.refuse(t, state.RegisterVolume{Volume: fresh}, csi.ErrVolumeNotFound, "not registered")
	both := fresh
	both.ExternalID, both.Creating = "", true
	w.refuse(t, state.RegisterVolume{Volume: both}, csi.ErrInvalidRequest, "both Creating and Deleting")

	withdrawn := w.volume(t, nsDefault, "data")
	withdrawn.Deleting = false
	w.must(t, state.RegisterVolume{Volume: *withdrawn})
	w.must(t, claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)))

	// A volume with a claim cannot be marked: the claim and the intent
	// are decided in one transaction, whichever comes first.
	inUse := w.volume(t, nsDefault, "data")
	inUse.Deleting = true
	w.refuse(t, state.RegisterVolume{Volume: *inUse}, csi.ErrVolumeInUse, "claims or attachments")
}
