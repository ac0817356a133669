package cli

import (
	"context"
	"fmt"
)

func (e *env) clusterStatus(ctx context.Context, args []string) int {
	c := e.newCommand("cluster status", "", "Shows the servers of a cluster-mode server's raft configuration and which one leads, as the server at -address sees them. A single server is a cluster of one.",
		"refserver cluster status -address 127.0.0.1:7656")
	code := ExitOK
	if !c.parse(args, 0, 0, &code) {
		return code
	}
	cl, ctx, done, err := c.client(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer done()
	st, err := retry(ctx, c, cl.Status)
	if err != nil {
		return c.fail(fmt.Errorf("%w (is the server in cluster mode, started with -bootstrap-expect?)", err))
	}
	if *c.json {
		return c.printJSON(st)
	}
	leader := st.LeaderID
	switch {
	case st.Leader:
		leader += " (this server)"
	case leader == "" && st.UnreachableLeaderID != "":
		leader = "none reachable (" + st.UnreachableLeaderID + " led, but its API does not answer; an election follows)"
	case leader == "":
		leader = "none known (election running, or the cluster has not formed)"
	}
	t := newTable(e.stdout)
	t.row("Server", st.ID)
	t.row("Leader", leader)
	t.row("Applied index", fmt.Sprint(st.AppliedIndex))
	t.flush()
	fmt.Fprintln(e.stdout)
	if len(st.Servers) == 0 {
		fmt.Fprintf(e.stdout, "The cluster has not formed yet: it forms once %d servers know each other.\n", st.BootstrapExpect)
		return ExitOK
	}
	t = newTable(e.stdout, "ID", "RAFT ADDRESS", "API ADDRESS", "LEADER")
	for _, s := range st.Servers {
		t.row(s.ID, s.RaftAddress, s.APIAddress, yesNo(s.ID == st.LeaderID))
	}
	t.flush()
	return ExitOK
}
