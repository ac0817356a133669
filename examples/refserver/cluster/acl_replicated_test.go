package cluster_test

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/cluster"
)

// TestCluster_ACL_Replicated bootstraps ACLs on the three servers of a
// cluster at once: one bootstrap makes the management token, the others
// are refused, and the token works on every server
// (the state holds its hash, replicated, no server has a token file), a
// second bootstrap on another server is refused, a namespace token made
// on a follower is refused outside its namespace everywhere, a revoked
// token stops working everywhere, and no data dir holds a secret.
func TestCluster_ACL_Replicated(t *testing.T) {
	c := startCluster(t, func(cfg *cluster.Config) { cfg.ACL = true })
	ctx := waitCtx(t)
	if _, _, err := c.members["s2"].client.Plugins(ctx, nil); !errors.Is(err, csi.ErrPermissionDenied) {
		t.Fatalf("a read before the bootstrap without a token: %v, want csi.ErrPermissionDenied", err)
	}
	boot, bootedOn := c.raceBootstraps()
	c.waitApplied(boot.Index)
	for _, id := range c.ids {
		if _, _, err := c.members[id].client.WithToken(boot.Token).Plugins(ctx, nil); err != nil {
			t.Errorf("server %s refuses the token bootstrapped on %s: %v", id, bootedOn, err)
		}
	}
	if _, err := c.members["s3"].client.BootstrapACL(ctx); !errors.Is(err, csi.ErrPermissionDenied) {
		t.Fatalf("a later bootstrap on s3: %v, want csi.ErrPermissionDenied", err)
	}

	team, err := c.members["s2"].client.WithToken(boot.Token).CreateACLToken(ctx, "team-a", &api.ACLTokenRequest{
		Namespaces: []string{"team-a"}, Permissions: []csi.Permission{csi.PermVolumeRead}})
	must(t, err)
	c.waitApplied(team.Index)
	c.expectNoStoreHolds(boot.Token, team.Token)
	for _, id := range c.ids {
		cl := c.members[id].client.WithToken(team.Token)
		if _, _, err := cl.Volumes(ctx, "team-a", "", nil); err != nil {
			t.Errorf("server %s: the team token in its namespace: %v", id, err)
		}
		if _, _, err := cl.Volumes(ctx, "team-b", "", nil); !errors.Is(err, csi.ErrPermissionDenied) {
			t.Errorf("server %s: the team token in another namespace: %v, want csi.ErrPermissionDenied", id, err)
		}
	}
	revoked, err := c.members["s3"].client.WithToken(boot.Token).DeleteACLToken(ctx, "team-a")
	must(t, err)
	c.waitApplied(revoked)
	for _, id := range c.ids {
		if _, _, err := c.members[id].client.WithToken(team.Token).Volumes(ctx, "team-a", "", nil); !errors.Is(err, csi.ErrPermissionDenied) {
			t.Errorf("server %s: a revoked token: %v, want csi.ErrPermissionDenied", id, err)
		}
	}
	toks, err := c.members["s1"].client.WithToken(boot.Token).ACLTokens(ctx)
	must(t, err)
	if len(toks) != 1 || toks[0].Name != "management" || toks[0].Token != "" {
		t.Fatalf("tokens after the revocation: %+v", toks)
	}
	c.close()
	for _, id := range c.ids {
		for _, secret := range []string{boot.Token, team.Token} {
			expectNoFileHolds(t, filepath.Join(c.dir, id), secret)
		}
	}
}

// raceBootstraps bootstraps ACLs on every server at once and checks
// that exactly one is answered with a token, the others refused; it
// returns that token and the server that made it.
func (c *testCluster) raceBootstraps() (*api.ACLToken, string) {
	c.t.Helper()
	type answer struct {
		id  string
		tok *api.ACLToken
		err error
	}
	answers := make(chan answer, len(c.ids))
	start := make(chan struct{})
	for _, id := range c.ids {
		cl := c.members[id].client
		go func() {
			<-start
			tok, err := cl.BootstrapACL(waitCtx(c.t))
			answers <- answer{id, tok, err}
		}()
	}
	close(start)
	var won []answer
	for range c.ids {
		select {
		case a := <-answers:
			switch {
			case a.err == nil && a.tok.Token != "":
				won = append(won, a)
			case !errors.Is(a.err, csi.ErrPermissionDenied):
				c.t.Errorf("a racing bootstrap on %s: %+v, %v; want a token or csi.ErrPermissionDenied", a.id, a.tok, a.err)
			}
		case <-time.After(time.Minute):
			c.t.Fatal("the racing bootstraps did not all answer within a minute")
		}
	}
	if len(won) != 1 {
		c.t.Fatalf("%d of %d racing bootstraps made a token, want exactly 1", len(won), len(c.ids))
	}
	return won[0].tok, won[0].id
}

// waitApplied waits until every server has applied the write at index.
func (c *testCluster) waitApplied(index uint64) {
	c.t.Helper()
	for _, id := range c.ids {
		if err := c.members[id].srv.Raft().FSM().WaitApplied(waitCtx(c.t), index); err != nil {
			c.t.Fatalf("server %s: waiting for index %d: %v", id, index, err)
		}
	}
}

// expectNoStoreHolds checks that no replica's token rows hold any of
// secrets: the state keeps each token by its hash alone.
func (c *testCluster) expectNoStoreHolds(secrets ...string) {
	c.t.Helper()
	for _, id := range c.ids {
		toks, err := c.members[id].srv.Store().ACLTokens()
		must(c.t, err)
		rows, err := json.Marshal(toks)
		must(c.t, err)
		for _, secret := range secrets {
			if len(toks) == 0 || strings.Contains(string(rows), secret) {
				c.t.Errorf("server %s: %d token rows, a secret among them: %t", id, len(toks), strings.Contains(string(rows), secret))
			}
		}
	}
}
