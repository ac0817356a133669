package cluster_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"time"

	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/cluster"
)

// One server of a cluster. A three-server cluster runs three of these,
// each with BootstrapExpect 3 and the other two servers' API addresses
// in Join; this example runs a cluster of one (BootstrapExpect 1) so
// that it stands alone.
func Example() {
	dir, err := os.MkdirTemp("", "refserver-cluster")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// Short timeouts so the example elects quickly; leave Raft nil for
	// raft's defaults.
	rc := raft.DefaultConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = 100*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond
	srv, err := cluster.New(cluster.Config{
		ID: "s1", DataDir: dir, BootstrapExpect: 1, RaftAddr: "127.0.0.1:0", Raft: rc,
		// Join: []string{"127.0.0.1:4647", "127.0.0.1:4648"}, with BootstrapExpect 3
	})
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, lis) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			log.Fatal(err)
		}
	}()

	// Any server answers the API; its status says who leads.
	client, err := api.NewClient(lis.Addr().String(), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := client.WaitLeader(wctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("server %s, leader %s, %d server(s)\n", st.ID, st.LeaderID, len(st.Servers))
	// Output:
	// server s1, leader s1, 1 server(s)
}
