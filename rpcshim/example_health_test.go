package rpcshim_test

import (
	"context"
	"fmt"
	"log"

	"github.com/csikit/csikit/health"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// The leader's health monitor reads conditions through the router's
// controllers and node usage through the node endpoints, which call
// NodeGetVolumeStats at the paths their mounters track. A host runs
// Run(ctx) on the leader; here one pass over an empty store.
func ExampleRouter_HealthNodes() {
	store, err := state.NewMemStore(state.Config{})
	if err != nil {
		log.Fatal(err)
	}
	transport := rpcshim.NewInmemTransport()
	defer transport.Close()
	router, err := rpcshim.NewRouter(rpcshim.RouterConfig{Store: store, Transport: transport, NodeStatuses: &rpcshim.InmemNodeStatuses{}})
	if err != nil {
		log.Fatal(err)
	}
	m, err := health.New(health.Config{
		Store: store, Applier: state.NewLocalApplier(store),
		Controllers: router.HealthControllers(), Nodes: router.HealthNodes(),
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("pass:", m.Pass(context.Background()))
	// Output:
	// pass: <nil>
}
