package sim

import (
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csitest"
)

// claimSpan is one claim attempt of the workload, as positions in the
// controller plugin's call log: how many calls had arrived when the
// attempt began and when it returned.
type claimSpan struct {
	vol, node  string
	start, end int
}

// noteClaim records a claim attempt's span; start is the call count
// taken before the attempt.
func (r *run) noteClaim(vol, node string, start int) {
	end := len(r.w.ctl.Calls())
	r.mu.Lock()
	r.claims = append(r.claims, claimSpan{vol: vol, node: node, start: start, end: end})
	r.mu.Unlock()
}

// invNoPublishAfterRelease: once ControllerUnpublish succeeded for a
// volume and node, no ControllerPublish of that volume to that node
// arrives unless a claim on that node was being written after the
// unpublish (an attempt that returned after it arrived and began
// before the publish did). A publish with no such claim is a stale
// retry or a release that forgot its own detach.
func invNoPublishAfterRelease(r *run) []string {
	calls := r.w.ctl.Calls()
	r.mu.Lock()
	spans := append([]claimSpan(nil), r.claims...)
	r.mu.Unlock()
	released := map[[2]string]int{} // volume, node -> log position of the last unpublish
	var bad []string
	for i, c := range calls {
		switch c.Method {
		case csitest.MethodControllerUnpublishVolume:
			req, ok := c.Request.(*csipb.ControllerUnpublishVolumeRequest)
			if ok && !c.Pending && c.Code == codes.OK {
				released[[2]string{req.GetVolumeId(), req.GetNodeId()}] = i
			}
		case csitest.MethodControllerPublishVolume:
			req, ok := c.Request.(*csipb.ControllerPublishVolumeRequest)
			if !ok {
				continue
			}
			key := [2]string{req.GetVolumeId(), req.GetNodeId()}
			j, was := released[key]
			if !was || claimedBetween(spans, key, j, i) {
				continue
			}
			bad = append(bad, fmt.Sprintf("ControllerPublish of %s to %s (call %d) follows its ControllerUnpublish (call %d) with no new claim on that node",
				key[0], key[1], i, j))
		}
	}
	return bad
}

// claimedBetween tells whether a claim attempt of key's volume on its
// node overlaps the log positions (after, before).
func claimedBetween(spans []claimSpan, key [2]string, after, before int) bool {
	for _, s := range spans {
		if "ext-"+s.vol == key[0] && "csi-"+s.node == key[1] && s.end > after && s.start <= before {
			return true
		}
	}
	return false
}
