// Package sim is csikit's seeded whole-stack simulation. It holds tests
// only: this file is here for the package's documentation.
//
// One world is three raftstate servers over raft's in-memory transport
// (each with a Router, a Server and a claim release Worker, enabled
// while it leads), three node agents (a fingerprint Manager, a Mounter
// on a temp dir and a NodeEndpoint, reached through rpcshim's
// InmemTransport), csitest plugins over real gRPC on unix sockets (a
// node plugin per node, a controller plugin on n1), and one fake clock
// (csi/clock) for the workers' retries and backoff.
//
// A seed decides the whole decision trace: the workload (register,
// claim read and write in several access modes, mount, stop) and the
// fault schedule (plugin errors of every class, partitions, agent crash
// and restart from its state dir, agent crash while a NodePublish is in
// flight, leadership transfer, a claim racing a detach, a node's
// unmount report racing a slow ControllerPublish); a second stream of
// the seed adds node drains, plugin restarts and four allocations
// claiming one volume at once (extra_test.go), a third six to eight
// allocations rushing one single-writer volume (rush_test.go), and a
// fourth the lifecycle (life_test.go): a volume deleted while a claim
// races the delete, a node leaving for good, the leader killed and
// restarted from its raft data dir, expand, snapshot and restore; a
// fifth turns a volume's condition at the controller abnormal or normal
// and runs a pass of the leader's health monitor (health_test.go); each
// new stream leaves the earlier ones' decisions as they were. A plan
// that kills keeps its servers' raft state in data dirs (on /dev/shm
// when there is one); the others keep it in memory, which costs less
// CPU. The decisions are drawn from the seed
// alone, never from what an operation returned, so the same seed gives
// the same trace (TestSim_TraceIsStable checks its hash). After every
// step and at quiescence the invariants (invariants_test.go) are
// checked (ControllerPublish never following a release among them);
// each failure message names the seed. TestMain fails the package when
// a world leaves goroutines behind (goleak).
//
// # Why not testing/synctest
//
// A synctest bubble needs every goroutine in it to block durably on
// bubble-owned primitives. hashicorp/raft's goroutines wait on real
// network timers and channels outside the bubble (and its in-memory
// transport's timeouts), and grpc's server and client goroutines block
// on sockets, which are never durably blocked; the bubble then never
// advances its clock or deadlocks. So time is driven instead by
// csikit's injected fake clock where csikit has one (the claim
// worker), raft runs with short real timeouts, and every wait on
// another goroutine is a channel or a store watch with a real-time
// bound.
//
// # Running
//
// The default is 30 seeds x 100 steps (4 x 60 under the race
// detector), 16 seeds at a time: a world waits on raft and gRPC far
// more than it computes. Test binary flags go after the package.
//
//	go test ./internal/sim                        # the default seeds
//	go test ./internal/sim -run 'TestSim$' -seed 7    # one seed
//	go test ./internal/sim -run 'TestSim$' -seed 7 -steps 400 -rerun 20 -shrink
//	CSIKIT_SIM_SEEDS=10000 go test ./internal/sim -run 'TestSim$' -timeout 0
//
// A failing seed is rerun (-rerun times) and reported with how often it
// failed, since goroutine scheduling still leaves freedom; -shrink then
// looks for the shortest prefix of the trace that still fails.
package sim
