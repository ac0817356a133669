package cli_test

import (
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/cli"
	"github.com/csikit/csikit/rpcshim"
)

// freeAddrs picks n free loopback ports: the servers of a cluster must
// know each other's API addresses before they start.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	for _, l := range ls {
		must(t, l.Close())
	}
	return out
}

// TestCLI_ServerMode_Cluster runs three `server -bootstrap-expect 3`
// commands and an agent given all three, and uses the CLI against each
// server: a write through a follower shows on the others.
func TestCLI_ServerMode_Cluster(t *testing.T) {
	dir := shortTempDir(t)
	addrs := freeAddrs(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type proc struct {
		stop      context.CancelFunc
		done      chan int
		out       *syncBuffer
		err       *syncBuffer
		listening chan struct{} // closed at the server's "API listening" line
	}
	start := func(args ...string) *proc {
		pctx, stop := context.WithCancel(context.Background())
		p := &proc{stop: stop, done: make(chan int, 1), out: &syncBuffer{}, err: &syncBuffer{}, listening: make(chan struct{})}
		lw := &lineWriter{line: func(l string) {
			_, _ = p.out.Write([]byte(l + "\n"))
			if strings.HasPrefix(l, "[server] API listening on ") {
				close(p.listening)
			}
		}}
		go func() { p.done <- cli.Run(pctx, args, lw, p.err) }()
		return p
	}
	var procs []*proc
	defer func() {
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop()
			code := <-procs[i].done
			procs[i].done <- code
			if code != cli.ExitOK {
				t.Errorf("process %d: exit %d\n%s", i, code, procs[i].err)
			}
		}
	}()
	ids := []string{"s1", "s2", "s3"}
	for i, id := range ids {
		var join []string
		for j, a := range addrs {
			if j != i {
				join = append(join, a)
			}
		}
		procs = append(procs, start("server", "-addr", addrs[i], "-data-dir", filepath.Join(dir, id), "-bootstrap-expect", "3",
			"-raft-addr", "127.0.0.1:0", "-join", strings.Join(join, ","), "-node-id", id))
	}
	clients := make([]*api.Client, 3)
	var leader string
	for i, a := range addrs {
		cl, err := api.NewClient(a, nil)
		must(t, err)
		defer cl.Close()
		clients[i] = cl
		select {
		case <-procs[i].listening:
		case code := <-procs[i].done:
			procs[i].done <- code
			t.Fatalf("server %s exited %d\n%s", ids[i], code, procs[i].err)
		case <-ctx.Done():
			t.Fatalf("server %s is not listening after 30s\n%s%s", ids[i], procs[i].out, procs[i].err)
		}
		st, err := cl.WaitLeader(ctx)
		if err != nil || st.LeaderID == "" {
			t.Fatalf("server %s: no leader (%+v, %v)\nstdout:\n%s\nstderr:\n%s", ids[i], st, err, procs[i].out, procs[i].err)
		}
		leader = st.LeaderID
	}
	var follower, other int
	for i, id := range ids {
		if id != leader {
			follower, other = i, (i+1)%3
			if ids[other] == leader {
				other = (other + 1) % 3
			}
			break
		}
	}
	run := func(i int, args ...string) string {
		t.Helper()
		out, errOut, code := runCLI(t, append(args, "-address", addrs[i])...)
		if code != cli.ExitOK {
			t.Fatalf("refserver %s on %s: exit %d\n%s%s", strings.Join(args, " "), ids[i], code, out, errOut)
		}
		return out
	}

	status := run(follower, "cluster", "status")
	for _, want := range []string{"Server         " + ids[follower], "Leader         " + leader, "ID  RAFT ADDRESS"} {
		if !strings.Contains(status, want) {
			t.Errorf("cluster status on %s lacks %q:\n%s", ids[follower], want, status)
		}
	}

	procs = append(procs, start("agent", "-server", strings.Join(addrs, ","), "-node-id", "node-1", "-addr", "127.0.0.1:0",
		"-data-dir", filepath.Join(dir, "node-1"), "-hostpath-data-dir", filepath.Join(dir, "plugin"), "-hostpath-mount", "symlink"))
	for i, cl := range clients {
		if _, err := cl.WaitPlugin(ctx, "hostpath", func(p *csi.Plugin) bool { return p != nil && p.NodesHealthy == 1 }); err != nil {
			t.Fatalf("server %s: the agent's plugin is not healthy: %v\nagent:\n%s%s", ids[i], err, procs[3].out, procs[3].err)
		}
	}
	for _, a := range addrs {
		if !strings.Contains(procs[3].out.String(), "registered with http://"+a) {
			t.Errorf("the agent did not register with %s:\n%s", a, procs[3].out)
		}
	}

	// A write through a follower is forwarded to the leader.
	var created rpcshim.VolumeResponse
	must(t, json.Unmarshal([]byte(run(follower, "volume", "create", "-plugin", "hostpath", "-json", "vol1")), &created))
	want := run(follower, "volume", "status", "vol1")
	for _, i := range []int{other, (3 - follower - other)} {
		// Once that server's replica has applied the write (a blocking
		// query), it shows the same.
		if _, _, err := clients[i].Volumes(ctx, "", "", &api.QueryOptions{WaitIndex: created.Index - 1}); err != nil {
			t.Fatal(err)
		}
		if got := run(i, "volume", "status", "vol1"); got != want {
			t.Errorf("volume status on %s:\n%s\nwant (on %s):\n%s", ids[i], got, ids[follower], want)
		}
	}

	// The leader dies. A write through a follower right after rides
	// through the election within -timeout, the follower's status never
	// names the dead leader, and then names the new one.
	li := slices.Index(ids, leader)
	procs[li].stop()
	if code := <-procs[li].done; code != cli.ExitOK {
		t.Fatalf("leader %s: exit %d\n%s", leader, code, procs[li].err)
	}
	procs[li].done <- cli.ExitOK
	if st := run(follower, "cluster", "status"); strings.Contains(st, "Leader         "+leader) {
		t.Errorf("right after leader %s stopped, the status on %s still names it:\n%s", leader, ids[follower], st)
	}
	out, errOut, code := runCLI(t, "volume", "create", "-plugin", "hostpath", "-timeout", "30s", "-address", addrs[follower], "vol2")
	if code != cli.ExitOK || !strings.Contains(out, "Volume default/vol2 created") {
		t.Fatalf("create through %s after the leader stopped: exit %d\nstdout:\n%s\nstderr:\n%s", ids[follower], code, out, errOut)
	}
	if n := strings.Count(errOut, "retrying"); n > 1 {
		t.Errorf("the retry is said %d times, want at most once:\n%s", n, errOut)
	}
	st, err := clients[follower].WaitLeader(ctx)
	if err != nil || st.LeaderID == "" || st.LeaderID == leader {
		t.Fatalf("no new leader on %s: %+v, %v", ids[follower], st, err)
	}
	if got := run(follower, "cluster", "status"); !strings.Contains(got, "Leader         "+st.LeaderID) {
		t.Errorf("the status on %s does not name the new leader %s:\n%s", ids[follower], st.LeaderID, got)
	}
}

func TestCLI_ServerMode_ClusterFlags(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"join without bootstrap-expect", []string{"-join", "127.0.0.1:1", "-dev"}, "-join is a cluster mode flag"},
		{"raft address without bootstrap-expect", []string{"-raft-addr", "127.0.0.1:0", "-dev"}, "-raft-addr is a cluster mode flag"},
		{"dev with a data dir", []string{"-dev", "-data-dir", dir}, "-dev keeps the state in memory; it takes no -data-dir"},
		{"dev cluster", []string{"-dev", "-bootstrap-expect", "3"}, "-dev runs a single server"},
		{"no data dir", []string{"-bootstrap-expect", "3", "-join", "127.0.0.1:1"}, "cluster mode needs -data-dir"},
		{"nobody to join", []string{"-bootstrap-expect", "3", "-data-dir", dir}, "Join lists no server"},
		{"negative count", []string{"-bootstrap-expect", "-1", "-data-dir", dir}, "-bootstrap-expect -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := runCLI(t, append([]string{"server", "-addr", "127.0.0.1:0"}, tt.args...)...)
			if code != cli.ExitUsage || !strings.Contains(errOut, tt.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut, cli.ExitUsage, tt.want)
			}
		})
	}
}

// TestCLI_ClusterStatus_SingleServer: a single server is a one-voter
// raft cluster, and its status says it leads itself.
func TestCLI_ClusterStatus_SingleServer(t *testing.T) {
	url, stop := runServerMode(t, "-node-id", "solo")
	defer stop()
	out, errOut, code := runCLI(t, "cluster", "status", "-address", url)
	if code != cli.ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"Server         solo", "Leader         solo (this server)", "solo  inmem:solo"} {
		if !strings.Contains(out, want) {
			t.Errorf("cluster status lacks %q:\n%s", want, out)
		}
	}
}
