package rpcshim

import (
	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/state"
)

// countClaim counts a claim written (a repeat that changed nothing is
// not counted) or refused, by the refusal's sentinel code.
func (s *Server) countClaim(res state.Result, err error) {
	switch {
	case err != nil:
		s.metrics.IncrCounterWithLabels(metrics.ClaimsRefused, 1, []metrics.Label{{Name: "reason", Value: metrics.Reason(err)}})
	case res.Changed:
		s.metrics.IncrCounter(metrics.ClaimsTaken, 1)
	}
}
