package cluster_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/cluster"
	"github.com/csikit/csikit/examples/refserver/server"
	"github.com/csikit/csikit/state"
)

// TestServer_Internal drives the server-to-server endpoints and the
// forwarding of a follower's writes.
func TestServer_Internal(t *testing.T) {
	c := startCluster(t)
	leader := c.leaders.wait(t, c.ids...)
	follower := c.others(leader)[0]
	ctx := waitCtx(t)
	lc, fc := c.members[leader].client, c.members[follower].client

	t.Run("status", func(t *testing.T) {
		for _, id := range c.ids {
			st, err := c.members[id].client.WaitLeader(ctx)
			must(t, err)
			m := c.members[id]
			if st.ID != id || st.RaftAddress != m.raftAddr || st.APIAddress != m.url() || st.LeaderID != leader ||
				st.Leader != (id == leader) || st.BootstrapExpect != 3 || len(st.Servers) != 3 {
				t.Errorf("server %s status: %+v", id, st)
			}
			for _, s := range st.Servers {
				if want := c.members[s.ID]; want == nil || s.RaftAddress != want.raftAddr || !strings.HasSuffix(s.APIAddress, want.apiAddr) {
					t.Errorf("server %s lists %+v", id, s)
				}
			}
		}
	})

	enc := func(cmd state.Command) []byte {
		b, err := state.EncodeCommand(cmd)
		must(t, err)
		return b
	}
	place := func(alloc string) state.Command {
		return state.UpsertAllocations{Allocations: []csi.Allocation{{ID: alloc, Namespace: "default", NodeID: "node-1"}}}
	}

	t.Run("apply from a non-server is refused", func(t *testing.T) {
		for name, token := range map[string]string{"no token": "", "wrong token": "not-the-cluster-token-xxxxx"} {
			raw, err := api.NewClient(c.members[leader].apiAddr, nil)
			must(t, err)
			defer raw.Close()
			outsider := raw.WithClusterToken(token)
			before := c.members[leader].srv.Raft().FSM().AppliedIndex()
			_, err = outsider.Apply(ctx, enc(place("from-outside")))
			var ae *api.Error
			if !errors.Is(err, csi.ErrPermissionDenied) || !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden {
				t.Fatalf("%s: apply = %v, want 403 csi.ErrPermissionDenied", name, err)
			}
			if after := c.members[leader].srv.Raft().FSM().AppliedIndex(); after != before {
				t.Fatalf("%s: a refused apply moved the log from %d to %d", name, before, after)
			}
			if _, err := c.members[leader].srv.Store().Allocation("from-outside"); !errors.Is(err, csi.ErrAllocationNotFound) {
				t.Fatalf("%s: the refused command was applied: %v", name, err)
			}
		}
		if !strings.Contains(c.members[leader].events.String(), "refused POST /v1/internal/apply") {
			t.Errorf("refusal not printed:\n%s", c.members[leader].events.String())
		}
	})

	t.Run("apply on the leader", func(t *testing.T) {
		res, err := lc.Apply(ctx, enc(place("on-leader")))
		must(t, err)
		if res.Index == 0 || !res.Changed {
			t.Fatalf("result %+v", res)
		}
		must(t, c.members[follower].srv.Raft().FSM().WaitApplied(ctx, res.Index))
		if _, err := c.members[follower].srv.Store().Allocation("on-leader"); err != nil {
			t.Errorf("the follower's replica: %v", err)
		}
	})

	t.Run("apply on a follower is refused, not forwarded", func(t *testing.T) {
		_, err := fc.Apply(ctx, enc(place("on-follower")))
		var ae *api.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusServiceUnavailable || csi.Classify(err) != csi.ClassRetryable ||
			!strings.Contains(err.Error(), "not leader, leader is ") {
			t.Fatalf("got %v, want a retryable 503 naming the leader", err)
		}
		if _, err := c.members[leader].srv.Store().Allocation("on-follower"); !errors.Is(err, csi.ErrAllocationNotFound) {
			t.Errorf("the refused command was applied: %v", err)
		}
	})

	t.Run("a follower's writes are forwarded", func(t *testing.T) {
		rs := c.members[follower].srv.Raft()
		res, err := rs.Apply(ctx, place("forwarded"))
		must(t, err)
		// Applied by the leader, and already in the follower's replica.
		if _, err := c.members[follower].srv.Store().Allocation("forwarded"); err != nil || res.Index == 0 {
			t.Errorf("after a forwarded write (index %d): %v", res.Index, err)
		}
		// The leader's refusal comes back with its sentinel.
		_, err = rs.Apply(ctx, state.ClaimVolume{Namespace: "default", VolumeID: "nope", Claim: csi.Claim{
			AllocationID: "forwarded", NodeID: "node-1", Mode: csi.ClaimWrite,
			AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem,
		}})
		if !errors.Is(err, csi.ErrVolumeNotFound) {
			t.Errorf("forwarded claim of a missing volume: %v, want csi.ErrVolumeNotFound", err)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		tests := []struct {
			name, method, path, body string
			want                     int
		}{
			{"not a command", http.MethodPost, api.ApplyPath, `{"Kind":"no-such-kind","Body":{}}`, http.StatusBadRequest},
			{"not JSON", http.MethodPost, api.ApplyPath, `garbage`, http.StatusBadRequest},
			{"unknown endpoint", http.MethodGet, api.InternalPrefix + "nope", ``, http.StatusBadRequest},
			{"bad wait", http.MethodGet, api.StatusPath + "?wait-leader=soon", ``, http.StatusBadRequest},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				req, err := http.NewRequestWithContext(ctx, tt.method, c.members[leader].url()+tt.path, strings.NewReader(tt.body))
				must(t, err)
				req.Header.Set(api.ClusterTokenHeader, testClusterToken)
				resp, err := http.DefaultClient.Do(req)
				must(t, err)
				resp.Body.Close()
				if resp.StatusCode != tt.want {
					t.Errorf("status %d, want %d", resp.StatusCode, tt.want)
				}
			})
		}
		if _, err := lc.Apply(ctx, []byte("garbage")); !errors.Is(err, csi.ErrInvalidRequest) {
			t.Errorf("Client.Apply of garbage: %v", err)
		}
	})

	t.Run("apply to a server that is gone", func(t *testing.T) {
		dead, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		cl, err := api.NewClient(dead.Addr().String(), nil)
		must(t, err)
		defer cl.Close()
		must(t, dead.Close())
		_, err = cl.Apply(ctx, enc(place("nowhere")))
		if !errors.Is(err, csi.ErrUnavailable) || csi.Classify(err) != csi.ClassRetryable {
			t.Errorf("got %v (%s), want a retryable csi.ErrUnavailable: the request never left", err, csi.Classify(err))
		}
	})
	t.Run("apply to a server that drops the request", func(t *testing.T) {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}))
		defer hs.Close()
		cl, err := api.NewClient(hs.URL, nil)
		must(t, err)
		defer cl.Close()
		_, err = cl.Apply(ctx, enc(place("dropped")))
		if csi.Classify(err) != csi.ClassUncertain {
			t.Errorf("got %v (%s), want Uncertain: the leader may have applied it", err, csi.Classify(err))
		}
	})
	if t.Failed() {
		t.Log(describe(c))
	}
}

// TestServer_Run_JoinRefused: a -join address that is not a cluster-mode
// server stops Run with an error saying so.
func TestServer_Run_JoinRefused(t *testing.T) {
	single, err := server.New(server.Config{})
	must(t, err)
	slis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	sctx, stop := context.WithCancel(context.Background())
	singleDone := make(chan error, 1)
	go func() { singleDone <- single.Run(sctx, slis) }()
	defer func() {
		stop()
		must(t, <-singleDone)
	}()

	cfg := clusterConfig(t.TempDir())
	cfg.BootstrapExpect, cfg.Join = 2, []string{slis.Addr().String()}
	srv, err := cluster.New(cfg)
	must(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	err = srv.Run(waitCtx(t), lis)
	if !errors.Is(err, csi.ErrInvalidRequest) || !strings.Contains(err.Error(), "cluster mode") {
		t.Fatalf("Run: %v, want a refusal naming cluster mode", err)
	}
	select {
	case <-srv.Joined():
		t.Error("Joined is closed after a refused join")
	default:
	}
	// A Server runs once.
	lis2, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	if err := srv.Run(context.Background(), lis2); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Errorf("second Run: %v", err)
	}
}

// TestServer_Run_RaftAddressInUse: Run fails at start, and Ready still
// closes, with nothing left running.
func TestServer_Run_RaftAddressInUse(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer taken.Close()
	cfg := clusterConfig(t.TempDir())
	cfg.RaftAddr = taken.Addr().String()
	srv, err := cluster.New(cfg)
	must(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	if err := srv.Run(waitCtx(t), lis); err == nil || !strings.Contains(err.Error(), "raft TCP transport") {
		t.Fatalf("Run: %v, want the transport's failure", err)
	}
	<-srv.Ready()
	if srv.Raft() != nil || srv.Server() != nil || srv.Store() != nil {
		t.Error("a failed start left parts behind")
	}
	// The API listener was closed.
	if c, err := net.Dial("tcp", lis.Addr().String()); err == nil {
		c.Close()
		t.Error("the API listener is still open")
	}
}
