package cluster_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/cluster"
	"github.com/csikit/csikit/examples/refserver/events"
	"github.com/csikit/csikit/examples/refserver/internal/tlsconf"
)

// TestCluster_TLS: two servers with certificates of one CA form a
// cluster over the TLS raft transport and answer each other's API over
// https; a server with a certificate of another CA is refused by raft
// and by the API, even when it trusts the cluster's CA.
func TestCluster_TLS(t *testing.T) {
	dir := shortTempDir(t)
	good, other := filepath.Join(dir, "tls"), filepath.Join(dir, "other")
	must(t, tlsconf.Init(good, nil))
	must(t, tlsconf.Init(other, nil))
	b, err := tlsconf.Load(tlsconf.Paths(good, "server"))
	must(t, err)
	ids := []string{"s1", "s2"}
	lis := map[string]net.Listener{}
	for _, id := range ids {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		lis[id] = l
	}
	srvs := map[string]*cluster.Server{}
	for _, id := range ids {
		var join []string
		for _, o := range ids {
			if o != id {
				join = append(join, lis[o].Addr().String())
			}
		}
		srv, err := cluster.New(cluster.Config{
			ID: id, DataDir: filepath.Join(dir, id), BootstrapExpect: len(ids), RaftAddr: "127.0.0.1:0", Join: join,
			Raft: testRaftConfig(), HeartbeatTTL: time.Hour, Events: events.New(&syncBuffer{}), ClusterToken: testClusterToken,
			TLS: b.APIServer(), PeerTLS: b.MutualServer(), ClientTLS: b.Client(),
		})
		must(t, err)
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx, lis[id]) }()
		t.Cleanup(func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("server %s: %v", id, err)
			}
		})
		select {
		case <-srv.Ready():
		case err := <-done:
			done <- err
			t.Fatalf("server %s stopped at start: %v", id, err)
		}
		srvs[id] = srv
	}
	ctx := waitCtx(t)
	for _, id := range ids {
		if _, _, err := srvs[id].Raft().WaitLeader(ctx); err != nil {
			t.Fatalf("server %s: no leader over TLS raft: %v", id, err)
		}
	}
	s1Raft := srvs["s1"].Raft().Self().Addr
	client, err := api.NewTLSClient(lis["s2"].Addr().String(), b.Client())
	must(t, err)
	defer client.Close()
	st, err := client.WithClusterToken(testClusterToken).Status(ctx)
	must(t, err)
	if len(st.Servers) != 2 || st.LeaderID == "" {
		t.Fatalf("status over https: %+v, want 2 servers and a leader", st)
	}

	x, err := tlsconf.Load(tlsconf.Paths(other, "server"))
	must(t, err)
	trusting := x.Client()
	trusting.RootCAs = b.Pool() // trusts the cluster; the cluster does not trust it
	for name, conf := range map[string]struct{ server, client bool }{"another CA": {}, "another CA trusting the cluster's": {client: true}} {
		t.Run(name, func(t *testing.T) {
			cc := x.Client()
			if conf.client {
				cc = trusting
			}
			tr, err := tlsconf.NewTransport("127.0.0.1:0", nil, x.MutualServer(), cc, 1, 5*time.Second, hclog.NewNullLogger())
			must(t, err)
			defer tr.Close()
			var resp raft.RequestVoteResponse
			err = tr.RequestVote("s1", raft.ServerAddress(s1Raft), &raft.RequestVoteRequest{
				RPCHeader: raft.RPCHeader{ID: []byte("s3"), Addr: []byte(tr.LocalAddr())}, Term: 1 << 40,
			}, &resp)
			if err == nil {
				t.Fatalf("raft answered a server of another CA: %+v", resp)
			}
			intruder, err := api.NewTLSClient(lis["s1"].Addr().String(), cc)
			must(t, err)
			defer intruder.Close()
			if _, err := intruder.WithClusterToken(testClusterToken).Status(ctx); err == nil {
				t.Fatal("the API answered a server of another CA")
			}
		})
	}
	peers, err := srvs["s1"].Raft().Servers()
	must(t, err)
	if len(peers) != 2 {
		t.Fatalf("raft servers after the intruders: %v", peers)
	}
}

func TestNew_TLSPartial(t *testing.T) {
	b := &tls.Config{MinVersion: tls.VersionTLS12}
	_, err := cluster.New(cluster.Config{Dev: true, TLS: b})
	if !errors.Is(err, csi.ErrInvalidRequest) {
		t.Fatalf("New with TLS but no PeerTLS/ClientTLS: %v, want ErrInvalidRequest", err)
	}
}
