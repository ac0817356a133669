// Package raftstate replicates csikit's state on hashicorp/raft: every
// server keeps a local state.Store, every write is a state command in the
// raft log, and each server's FSM applies the same command at the same
// raft index.
//
// # Parts
//
// FSM is raft's state machine over a store: it decodes each committed
// entry with state.DecodeCommand and applies it with
// store.Apply(entry.Index, cmd); what the store answered (Result or
// error) is the entry's response on the server that appended it. Its
// snapshots are the store's own snapshot format (state.Snapshotter)
// behind one header line holding the applied index, captured whole at
// the moment raft asks, so a snapshot never holds entries raft will
// replay after it.
//
// Server runs one replica: raft with its log and stable store in boltdb
// (raft-boltdb/v2, with a cache of recent entries) and file snapshots
// under Config.DataDir, or everything in memory (Config.InMemory) for
// tests; bootstrap by expected count; the leadership signal; and
// Apply, the state.Applier that writes through the log.
//
// # Writes
//
// On the leader, Apply appends the encoded command and returns, once it
// is committed and applied to the leader's store, exactly what that
// store answered: errors are the store's own values, so errors.Is with
// csi sentinels and csi.Classify work as with state.LocalApplier.
//
// On a follower, Apply does one of two things, chosen by the host:
//
//   - With Config.Forward set, it hands the encoded command to Forward,
//     which the host implements over its server-to-server RPC: the
//     leader's handler calls ApplyForwarded (which never forwards
//     again) and sends back the Result or error. The follower then
//     waits until its own store has applied that index, so a read after
//     Apply sees the write, as the state.Applier contract promises.
//   - Without Forward, it refuses with a *NotLeaderError (errors.Is
//     ErrNotLeader, Retryable) naming the leader's raft address and ID,
//     or naming none while no leader is known; nothing is written. The
//     host sends the write to the leader itself, or retries.
//
// raft's own failures are classified for csikit's retry loops: not
// appended (Retryable); leadership lost, server shut down, or ctx ended
// while waiting (Uncertain: the entry may still commit).
//
// # Secrets at rest
//
// Commands and snapshots hold volume, claim and snapshot secrets. With
// Config.Keyring (package state/sealed, AES-256-GCM), the leader seals
// each command just before it appends it, and the FSM seals the store's
// snapshot whole (header version 2), so raft.db and the snapshot files
// never hold a secret in clear; the FSM opens both before it applies
// or restores, so the store keeps clear values. Every server needs the
// same keys; the package doc of sealed says how to share and rotate
// them. Entries and snapshots written before the keyring was set still
// read. Start refuses a keyring that does not open the newest sealed
// log entry, or the snapshot (errors match sealed.ErrWrongKey or
// sealed.ErrUnknownKey). Forwarded commands stay clear: they travel
// over the host's authenticated server-to-server channel.
//
// # A replica that diverges
//
// Every replica must apply every committed entry. One that meets an
// entry it cannot open or decode (a follower whose keyring lacks the
// key the leader rotated to, an altered entry, a command of a newer
// build) does not skip it, which would leave its store unlike the
// others' for good: its FSM diverges (ErrStateDiverged, a
// *DivergedError naming the entry and the cause, e.g.
// sealed.ErrUnknownKey). It applies nothing more, Server.Reader and
// FSM.Reader refuse every read with that error, and the Server shuts
// raft down and closes Server.Failed. The host serves reads from
// Server.Reader and watches Failed to stop serving from that server;
// the fix is the cause's (copy the key file), then a start on a new,
// empty store, which replays the log.
//
// # Forming the cluster
//
// A server with no raft state does not bootstrap alone. It bootstraps
// only once it knows Config.BootstrapExpect servers (itself and the
// peers given to Join, by ID and raft address), and then with exactly
// those, sorted by ID. Until then it has no configuration, so it cannot
// stand for election. The first server to know them all bootstraps and
// stands; the others vote for it and receive the configuration from its
// log. A server that reaches the count later either already holds that
// configuration (and does not bootstrap) or bootstraps with the same
// one, which raft accepts since the configurations are identical. Join
// refuses input that shows the servers were configured differently (an
// ID at two addresses, more servers than expected).
//
// A server started on a data dir that holds raft state
// (raft.HasExistingState) never bootstraps: it rejoins from its log and
// snapshots, and Join changes nothing. Its store is rebuilt from the
// latest snapshot and the log, so the host gives it a new, empty store
// on every start. Growing a formed cluster is raft's AddVoter on the
// leader (Server.Raft).
//
// # Leadership
//
// OnLeadership tells the host when this server leads: true once it is
// the leader and its store has applied every earlier entry (a raft
// barrier), so a leader-only worker starting then sees the whole state;
// false when it stops leading, and at Shutdown. The claim release
// worker is switched with srv.OnLeadership(worker.SetEnabled). IsLeader,
// Leader and WaitLeader answer the same question on demand.
//
// # Goroutines
//
// New starts nothing. Start starts raft's goroutines and one of the
// Server's own; Shutdown stops them, closes the stores and the
// transport, and returns when they are done. Each Apply on the leader
// waits for raft on a goroutine of its own so that ctx can end the
// wait; raft answers it when the entry commits or leadership is lost.
// Shutdown refuses new writes and lets those raft has taken be answered
// before it stops raft, since raft never answers an entry committed but
// not yet handed to the FSM when it stops (see Shutdown).
//
// # Version note
//
// The module pins github.com/hashicorp/raft v1.7.3:
// raft-boltdb/v2 v2.3.1 imports go-metrics/compat, which go-metrics
// v0.7.0, required by raft v1.8.0, no longer has. Moving to raft v1.8.0
// needs a raft-boltdb/v2 release without the compat shim, and nothing in
// this package changes.
//
// # Usage
//
// The host, on every server:
//
//  1. Build the transport: NewTCPTransport(bind, advertise, logger) for
//     a real cluster (raft.NewInmemTransport in tests). Once New
//     succeeds the Server owns it.
//  2. Build a new, empty store (state.NewMemStore) and the Server with
//     New: a stable ID, the store, the transport, the DataDir, the
//     BootstrapExpect count, and Forward if followers should forward
//     writes. Call Start.
//  3. Tell it about the other servers with Join(Peer{ID, Addr}, …), as
//     the host learns them (flags, discovery, a status call to each
//     peer); repeat Join freely, it is idempotent. The cluster forms
//     once a server knows BootstrapExpect servers; give every server the
//     same ones.
//  4. Use the Server as the state.Applier of everything that writes
//     (rpcshim.Server, claimgc.Worker, fingerprint intake) and
//     Server.Reader (the store's reads, refused once the replica
//     diverged) as their state.Reader, on every server; watch
//     Server.Failed.
//  5. Wire the leader-only work: srv.OnLeadership(worker.SetEnabled) for
//     the claim release worker, and run it (go worker.Run(ctx)).
//  6. If Forward is set, serve the leader's end of it: an RPC handler
//     that calls ApplyForwarded with the bytes received and sends back
//     the Result or the error with its csi sentinel and class (as
//     rpcshim's WireError carries them). Otherwise, turn a
//     *NotLeaderError into a redirect to LeaderAddr.
//  7. To stop: stop the workers, then Shutdown.
//
// # A reference server in cluster mode
//
// `server -data-dir D -bootstrap-expect 3 -join host2:4647 -join
// host3:4647` is a thin wrapper over the steps above:
//
//   - the server ID is generated once and kept in D (so it survives
//     restarts), the raft state lives in D/raft (Config.DataDir), and
//     the raft transport listens on its own port
//     (NewTCPTransport(-raft-bind, -advertise));
//   - the server's RPC answers a status call with its Self() and its
//     RPC address; for each -join address it calls that status,
//     retrying with backoff until the peer answers, then calls Join
//     with the Peer, and records the peer's RPC address by ID;
//   - Forward looks up the leader's RPC address by leaderID and sends
//     the bytes to an "apply" RPC whose handler calls ApplyForwarded;
//   - the rest is the single-server wiring with the Server in place of
//     state.NewLocalApplier, and OnLeadership switching the claim
//     worker. A restart with the same flags finds raft state in D, skips
//     the bootstrap, and its Join calls change nothing.
package raftstate
