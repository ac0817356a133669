package server_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/server"
	"github.com/csikit/csikit/rpcshim"
)

const (
	mgmtToken  = "management-token-0123456789abcdef"
	teamAToken = "team-a-token-0123456789abcdef"
	teamBToken = "team-b-token-0123456789abcdef"
)

func testACL(t *testing.T) *server.ACL {
	t.Helper()
	all := []csi.Permission{csi.PermVolumeRead, csi.PermVolumeWrite, csi.PermVolumeClaim, csi.PermPluginRead}
	acl, err := server.NewACL(map[string]server.Policy{
		mgmtToken:  {Name: "management", Permissions: []csi.Permission{csi.PermOperator}},
		teamAToken: {Name: "team-a", Namespaces: []string{"team-a"}, Permissions: all},
		teamBToken: {Name: "team-b", Namespaces: []string{"team-b"}, Permissions: all},
	})
	must(t, err)
	return acl
}

// TestServer_ACL_ReleaseOtherNamespace is the attack of a token holder
// of one namespace who releases an allocation of another: refused with
// csi.ErrPermissionDenied (403), and the claim stays taken. The same
// holds for reads of the other namespace's volume and claims, and for a
// request without a token.
func TestServer_ACL_ReleaseOtherNamespace(t *testing.T) {
	ts := startServer(t, server.Config{ACL: testACL(t)})
	ctx := context.Background()
	fakeNode(t, ts, "n1")
	mgmt, teamA, teamB := ts.client.WithToken(mgmtToken), ts.client.WithToken(teamAToken), ts.client.WithToken(teamBToken)
	_, err := teamA.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
		ID: "db", Namespace: "team-a", PluginID: "fake", ExternalID: "ext-db", Capabilities: []csi.Capability{snwFS},
		Secrets: csi.Secrets{"token": "s3cr3t-value"},
	}})
	must(t, err)
	_, err = teamA.Claim(ctx, "team-a", "db", &api.ClaimRequest{AllocationID: "web-1", NodeID: "n1", Mode: csi.ClaimWrite})
	must(t, err)

	for name, c := range map[string]*api.Client{"other namespace": teamB, "no token": ts.client, "unknown token": ts.client.WithToken("forged-token-0123456789abcdef")} {
		t.Run(name, func(t *testing.T) {
			if _, err := c.ReleaseIn(ctx, "team-a", "web-1"); !errors.Is(err, csi.ErrPermissionDenied) {
				t.Fatalf("release: %v, want csi.ErrPermissionDenied", err)
			}
			if _, _, err := c.Volume(ctx, "team-a", "db", nil); !errors.Is(err, csi.ErrPermissionDenied) {
				t.Fatalf("read volume: %v, want csi.ErrPermissionDenied", err)
			}
			if _, _, err := c.AllocationClaimsIn(ctx, "team-a", "web-1", nil); !errors.Is(err, csi.ErrPermissionDenied) {
				t.Fatalf("read claims: %v, want csi.ErrPermissionDenied", err)
			}
			claims, _, err := mgmt.AllocationClaimsIn(ctx, "team-a", "web-1", nil)
			must(t, err)
			if len(claims) != 1 || claims[0].Claim.State != csi.ClaimTaken {
				t.Fatalf("after a refused release the claims are %+v, want one taken claim", claims)
			}
		})
	}
	if _, err := teamA.ReleaseIn(ctx, "team-a", "web-1"); err != nil {
		t.Fatalf("the namespace's own token cannot release: %v", err)
	}
}

// TestServer_ACL_ReleaseLeaksNothing releases, with a token of another
// namespace, an allocation that exists and one that does not: the
// answers are the same refusal (status and text), so the token learns
// nothing of the other namespace. Naming its own namespace, the token
// gets the same "not found" for both.
func TestServer_ACL_ReleaseLeaksNothing(t *testing.T) {
	ts := startServer(t, server.Config{ACL: testACL(t)})
	ctx := context.Background()
	fakeNode(t, ts, "n1")
	teamA, teamB := ts.client.WithToken(teamAToken), ts.client.WithToken(teamBToken)
	_, err := teamA.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
		ID: "db", Namespace: "team-a", PluginID: "fake", ExternalID: "ext-db", Capabilities: []csi.Capability{snwFS},
	}})
	must(t, err)
	_, err = teamA.Claim(ctx, "team-a", "db", &api.ClaimRequest{AllocationID: "web-1", NodeID: "n1", Mode: csi.ClaimWrite})
	must(t, err)

	answer := func(ns, alloc string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.url+"/v1/allocations/"+alloc+"/release?namespace="+ns, nil)
		must(t, err)
		req.Header.Set(api.TokenHeader, teamBToken)
		r, err := http.DefaultClient.Do(req)
		must(t, err)
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, strings.ReplaceAll(string(b), alloc, "ALLOC")
	}
	for _, ns := range []string{"team-a", "team-b"} {
		existsCode, existsBody := answer(ns, "web-1")
		missingCode, missingBody := answer(ns, "web-9")
		if existsCode != missingCode || existsBody != missingBody {
			t.Errorf("namespace %s: an allocation that exists answers %d %s, one that does not %d %s",
				ns, existsCode, existsBody, missingCode, missingBody)
		}
		want := map[string]int{"team-a": http.StatusForbidden, "team-b": http.StatusNotFound}[ns]
		if existsCode != want {
			t.Errorf("namespace %s: status %d, want %d", ns, existsCode, want)
		}
	}
	if _, err := teamB.ReleaseIn(ctx, "team-b", "web-1"); !errors.Is(err, csi.ErrAllocationNotFound) {
		t.Fatalf("release of another namespace's allocation named in one's own: %v, want csi.ErrAllocationNotFound", err)
	}
	claims, _, err := teamA.AllocationClaimsIn(ctx, "team-a", "web-1", nil)
	must(t, err)
	if len(claims) != 1 || claims[0].Claim.State != csi.ClaimTaken {
		t.Fatalf("after refused releases the claims are %+v, want one taken claim", claims)
	}
}

// TestServer_ACL_NoSecretsAnywhere reads every read endpoint with the
// management token after a claim: no response holds the volume's
// secret.
func TestServer_ACL_NoSecretsAnywhere(t *testing.T) {
	ts := startServer(t, server.Config{ACL: testACL(t)})
	ctx := context.Background()
	fakeNode(t, ts, "n1")
	mgmt := ts.client.WithToken(mgmtToken)
	const secret = "s3cr3t-value"
	_, err := mgmt.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
		ID: "db", Namespace: "default", PluginID: "fake", ExternalID: "ext-db", Capabilities: []csi.Capability{snwFS},
		Secrets: csi.Secrets{"token": secret},
	}})
	must(t, err)
	_, err = mgmt.Claim(ctx, "default", "db", &api.ClaimRequest{AllocationID: "web-1", NodeID: "n1", Mode: csi.ClaimWrite})
	must(t, err)
	for _, path := range []string{"/v1/volumes", "/v1/volumes/default/db", "/v1/allocations/web-1/claims", "/v1/plugins", "/v1/plugins/fake", "/v1/nodes"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, ts.url+path, nil)
		must(t, err)
		req.Header.Set(api.TokenHeader, mgmtToken)
		r, err := http.DefaultClient.Do(req)
		must(t, err)
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != http.StatusOK || strings.Contains(string(b), secret) {
			t.Errorf("GET %s: status %d, holds the secret: %t", path, r.StatusCode, strings.Contains(string(b), secret))
		}
	}
}

// TestBootstrapACL makes an ACL file, whose management token is
// allowed everything, which holds no token in clear and is 0600, and
// which a second bootstrap leaves alone.
func TestBootstrapACL(t *testing.T) {
	path := t.TempDir() + "/acl.json"
	token, err := server.BootstrapACL(path)
	must(t, err)
	if _, err := server.BootstrapACL(path); err == nil {
		t.Fatal("a second bootstrap replaced the ACL file")
	}
	b, err := os.ReadFile(path)
	must(t, err)
	fi, err := os.Stat(path)
	must(t, err)
	if strings.Contains(string(b), token) || fi.Mode().Perm() != 0o600 {
		t.Fatalf("ACL file mode %v holds the token: %t", fi.Mode().Perm(), strings.Contains(string(b), token))
	}
	acl, err := server.LoadACL(path)
	must(t, err)
	ts := startServer(t, server.Config{ACL: acl})
	if _, _, err := ts.client.WithToken(token).Plugins(context.Background(), nil); err != nil {
		t.Fatalf("management token refused: %v", err)
	}
	if _, _, err := ts.client.Plugins(context.Background(), nil); !errors.Is(err, csi.ErrPermissionDenied) {
		t.Fatalf("no token: %v, want csi.ErrPermissionDenied", err)
	}
}
