package rpcshim_test

import (
	"github.com/csikit/csikit/claimgc"
	"github.com/csikit/csikit/rpcshim"
)

// The Router is what a host passes to the claim release worker as its
// node and controller steps, and rpcshim's node statuses serve it too;
// rpcshim does not import claimgc, so these checks live here.
var (
	_ claimgc.NodeDetacher       = (*rpcshim.Router)(nil)
	_ claimgc.ControllerDetacher = (*rpcshim.Router)(nil)
	_ claimgc.NodeStatuses       = rpcshim.NodeStatuses(nil)
	_ claimgc.NodeStatuses       = (*rpcshim.InmemNodeStatuses)(nil)
)
