package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/events"
	"github.com/csikit/csikit/examples/refserver/server"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer is an io.Writer safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testServer is a Server running on a loopback port, without agents,
// and a client of it. Its clock is t0 plus an offset the test moves.
type testServer struct {
	srv    *server.Server
	client *api.Client
	url    string
	out    *syncBuffer
	offset atomic.Int64
}

func (ts *testServer) advance(d time.Duration) { ts.offset.Add(int64(d)) }

func startServer(t *testing.T, cfg server.Config) *testServer {
	t.Helper()
	ts := &testServer{out: &syncBuffer{}}
	cfg.Now = func() time.Time { return t0.Add(time.Duration(ts.offset.Load())) }
	cfg.Events = events.New(ts.out)
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, lis) }()
	ts.srv, ts.url = srv, "http://"+lis.Addr().String()
	if ts.client, err = api.NewClient(ts.url, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ts.client.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server Run: %v", err)
		}
	})
	return ts
}

// fakeNode registers node n with the server and reports one healthy
// node instance of plugin "fake", without a controller, so volumes can
// be registered and claimed without any plugin call.
func fakeNode(t *testing.T, ts *testServer, n string) {
	t.Helper()
	ctx := context.Background()
	alloc := "plugin-fake-" + n
	must(t, ts.client.RegisterNode(ctx, n, &api.RegisterNodeRequest{
		Address: "127.0.0.1:1", // nothing listens: these tests make no node call
		Plugins: []api.PluginInstance{{PluginID: "fake", Type: csi.PluginTypeNode, AllocationID: alloc}},
	}))
	must(t, ts.client.ReportPlugins(ctx, n, []*csi.PluginInfo{fakeInfo(n, alloc)}))
}

func fakeInfo(n, alloc string) *csi.PluginInfo {
	return &csi.PluginInfo{
		PluginID: "fake", AllocationID: alloc, Type: csi.PluginTypeNode, Healthy: true,
		Provider: "fake.csikit.io", ProviderVersion: "1.0", UpdateTime: t0,
		NodeInfo: &csi.NodeInfo{ID: "csi-" + n},
	}
}

var snwFS = csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}

func registerFakeVolume(t *testing.T, ts *testServer, id string, secrets csi.Secrets, caps ...csi.Capability) *rpcshim.VolumeResponse {
	t.Helper()
	if len(caps) == 0 {
		caps = []csi.Capability{snwFS}
	}
	resp, err := ts.client.RegisterVolume(context.Background(), &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
		ID: id, Namespace: "default", PluginID: "fake", ExternalID: "ext-" + id, Capabilities: caps, Secrets: secrets,
	}})
	must(t, err)
	return resp
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestNew_Config(t *testing.T) {
	st, err := state.NewMemStore(state.Config{})
	must(t, err)
	tests := []struct {
		name string
		cfg  server.Config
		want error
	}{
		{"store without applier", server.Config{Store: st}, csi.ErrInvalidRequest},
		{"applier without store", server.Config{Applier: state.NewLocalApplier(st)}, csi.ErrInvalidRequest},
		{"negative TTL", server.Config{HeartbeatTTL: -time.Second}, csi.ErrInvalidRequest},
		{"negative shutdown timeout", server.Config{ShutdownTimeout: -time.Second}, csi.ErrInvalidRequest},
		{"defaults", server.Config{}, nil},
		{"injected store and applier", server.Config{Store: st, Applier: state.NewLocalApplier(st)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := server.New(tt.cfg)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestServer_Run_Once(t *testing.T) {
	srv, err := server.New(server.Config{})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i, want := range []error{nil, csi.ErrInvalidRequest} {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		if err := srv.Run(ctx, lis); !errors.Is(err, want) {
			t.Fatalf("Run %d: got %v, want %v", i+1, err, want)
		}
	}
}

// TestServer_API_Errors checks that refusals cross the API with their
// csi sentinel and a matching HTTP status.
func TestServer_API_Errors(t *testing.T) {
	ts := startServer(t, server.Config{})
	fakeNode(t, ts, "n1")
	registerFakeVolume(t, ts, "two-caps", nil, snwFS, csi.Capability{AccessMode: csi.AccessModeMultiNodeReaderOnly, AttachmentMode: csi.AttachmentModeFileSystem})
	ctx := context.Background()
	c := ts.client
	tests := []struct {
		name   string
		call   func() error
		want   error
		status int
	}{
		{"unknown volume", func() error { _, _, err := c.Volume(ctx, "default", "nope", nil); return err }, csi.ErrVolumeNotFound, http.StatusNotFound},
		{"bad volume ID", func() error { _, _, err := c.Volume(ctx, "default", "bad!id", nil); return err }, csi.ErrInvalidID, http.StatusBadRequest},
		{"bad namespace in list", func() error { _, _, err := c.Volumes(ctx, "bad ns", "", nil); return err }, csi.ErrInvalidID, http.StatusBadRequest},
		{"unknown plugin", func() error { _, _, err := c.Plugin(ctx, "nope", nil); return err }, csi.ErrPluginNotFound, http.StatusNotFound},
		{"release unknown allocation", func() error { _, err := c.Release(ctx, "nope"); return err }, csi.ErrAllocationNotFound, http.StatusNotFound},
		{"claims of unknown allocation", func() error { _, _, err := c.AllocationClaims(ctx, "nope", nil); return err }, csi.ErrAllocationNotFound, http.StatusNotFound},
		{"heartbeat of unknown node", func() error { return c.Heartbeat(ctx, "n9") }, csi.ErrNodeNotFound, http.StatusNotFound},
		{"plugins before registering", func() error { return c.ReportPlugins(ctx, "n9", nil) }, csi.ErrNodeNotFound, http.StatusNotFound},
		{"null plugin report", func() error { return c.ReportPlugins(ctx, "n1", []*csi.PluginInfo{nil}) }, csi.ErrInvalidRequest, http.StatusBadRequest},
		{"register without address", func() error { return c.RegisterNode(ctx, "n2", &api.RegisterNodeRequest{}) }, csi.ErrInvalidRequest, http.StatusBadRequest},
		{"register a bad plugin type", func() error {
			return c.RegisterNode(ctx, "n2", &api.RegisterNodeRequest{Address: "x:1", Plugins: []api.PluginInstance{{PluginID: "p", Type: "sidecar", AllocationID: "a"}}})
		}, csi.ErrInvalidRequest, http.StatusBadRequest},
		{"register a volume of an unknown plugin", func() error {
			_, err := c.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{ID: "v", Namespace: "default", PluginID: "nope", ExternalID: "x", Capabilities: []csi.Capability{snwFS}}})
			return err
		}, csi.ErrPluginNotFound, http.StatusNotFound},
		{"claim of unknown volume", func() error {
			_, err := c.Claim(ctx, "default", "nope", &api.ClaimRequest{AllocationID: "a1", NodeID: "n1"})
			return err
		}, csi.ErrVolumeNotFound, http.StatusNotFound},
		{"claim without allocation", func() error {
			_, err := c.Claim(ctx, "default", "two-caps", &api.ClaimRequest{NodeID: "n1"})
			return err
		}, csi.ErrInvalidID, http.StatusBadRequest},
		{"claim without modes of a two-capability volume", func() error {
			_, err := c.Claim(ctx, "default", "two-caps", &api.ClaimRequest{AllocationID: "a1", NodeID: "n1"})
			return err
		}, csi.ErrInvalidRequest, http.StatusBadRequest},
		{"claim on a node that never registered places nothing", func() error {
			_, err := c.Claim(ctx, "default", "two-caps", &api.ClaimRequest{AllocationID: "a2", NodeID: "n7", AccessMode: snwFS.AccessMode, AttachmentMode: snwFS.AttachmentMode})
			if _, _, cerr := c.AllocationClaims(ctx, "a2", nil); !errors.Is(cerr, csi.ErrAllocationNotFound) {
				t.Errorf("after a claim on an unknown node, allocation a2: %v; want it never placed", cerr)
			}
			return err
		}, csi.ErrNodeNotFound, http.StatusNotFound},
		{"write claim in a read-only mode", func() error {
			_, err := c.Claim(ctx, "default", "two-caps", &api.ClaimRequest{AllocationID: "a3", NodeID: "n1", Mode: csi.ClaimWrite,
				AccessMode: csi.AccessModeMultiNodeReaderOnly, AttachmentMode: csi.AttachmentModeFileSystem})
			return err
		}, csi.ErrAccessModeNotAllowed, http.StatusBadRequest},
		{"place an unknown volume", func() error {
			_, err := c.Place(ctx, "default", "nope", &api.PlaceRequest{Mode: csi.ClaimWrite})
			return err
		}, csi.ErrVolumeNotFound, http.StatusNotFound},
		{"place on a bad node ID", func() error {
			_, err := c.Place(ctx, "default", "two-caps", &api.PlaceRequest{Mode: csi.ClaimWrite, Nodes: []string{"../n1"},
				AccessMode: snwFS.AccessMode, AttachmentMode: snwFS.AttachmentMode})
			return err
		}, csi.ErrInvalidID, http.StatusBadRequest},
		{"place without modes of a two-capability volume", func() error {
			_, err := c.Place(ctx, "default", "two-caps", &api.PlaceRequest{Mode: csi.ClaimWrite})
			return err
		}, csi.ErrInvalidRequest, http.StatusBadRequest},
		{"blocking query with a bad index", func() error {
			_, _, err := c.Volumes(ctx, "", "", nil)
			if err != nil {
				return err
			}
			return rawStatus(t, ts.url+"/v1/volumes?index=x", http.StatusBadRequest, csi.ErrInvalidRequest)
		}, csi.ErrInvalidRequest, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			var ae *api.Error
			if errors.As(err, &ae) && ae.StatusCode != tt.status {
				t.Errorf("HTTP status %d, want %d", ae.StatusCode, tt.status)
			}
		})
	}
}

// rawStatus GETs url and checks the status and the error's sentinel.
func rawStatus(t *testing.T, url string, status int, want error) error {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body api.ErrorResponse
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("error body: %v", err)
	}
	if resp.StatusCode != status {
		t.Errorf("status %d, want %d", resp.StatusCode, status)
	}
	return body.Error.Err()
}

func TestServer_API_MalformedBodies(t *testing.T) {
	ts := startServer(t, server.Config{})
	tests := []struct {
		name, method, path, body string
	}{
		{"unknown field", http.MethodPut, "/v1/nodes/n1", `{"Address":"a:1","Adress":"typo"}`},
		{"not JSON", http.MethodPut, "/v1/nodes/n1", `address=a:1`},
		{"two values", http.MethodPut, "/v1/nodes/n1", `{"Address":"a:1"}{}`},
		{"body ID differs from the path", http.MethodPut, "/v1/volumes/default/v1", `{"Volume":{"ID":"v2"}}`},
		{"unknown endpoint", http.MethodGet, "/v2/volumes", ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, ts.url+tt.path, strings.NewReader(tt.body))
			must(t, err)
			resp, err := http.DefaultClient.Do(req)
			must(t, err)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var body api.ErrorResponse
			if err := json.Unmarshal(b, &body); err != nil || body.Error == nil {
				t.Fatalf("body %s is not an error response: %v", b, err)
			}
			if resp.StatusCode != http.StatusBadRequest || !errors.Is(body.Error.Err(), csi.ErrInvalidRequest) {
				t.Errorf("status %d, error %v; want 400 and csi.ErrInvalidRequest", resp.StatusCode, body.Error.Err())
			}
		})
	}
	if nodes, err := ts.client.Nodes(context.Background()); err != nil || len(nodes) != 0 {
		t.Errorf("a refused registration left nodes %v (%v)", nodes, err)
	}
}

// TestServer_Secrets checks that a volume's secrets never leave the
// server: not in a read, not in a write's response, not in a printed
// line.
func TestServer_Secrets(t *testing.T) {
	ts := startServer(t, server.Config{})
	fakeNode(t, ts, "n1")
	const secret = "s3cr3t-value"
	resp := registerFakeVolume(t, ts, "db", csi.Secrets{"token": secret})
	if resp.Volume.Secrets != nil {
		t.Errorf("the register response holds secrets")
	}
	claim, err := ts.client.Claim(context.Background(), "default", "db", &api.ClaimRequest{AllocationID: "web-1", NodeID: "n1", Mode: csi.ClaimWrite})
	must(t, err)
	if claim.Claim.ExternalNodeID != "csi-n1" {
		t.Errorf("claim's CSI node ID %q, want csi-n1", claim.Claim.ExternalNodeID)
	}
	for _, path := range []string{"/v1/volumes", "/v1/volumes/default/db", "/v1/allocations/web-1/claims", "/v1/plugins/fake", "/v1/nodes"} {
		r, err := http.Get(ts.url + path)
		must(t, err)
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != http.StatusOK || strings.Contains(string(b), secret) {
			t.Errorf("GET %s: status %d, body holds the secret: %t", path, r.StatusCode, strings.Contains(string(b), secret))
		}
	}
	if strings.Contains(ts.out.String(), secret) {
		t.Errorf("a lifecycle line holds the secret:\n%s", ts.out.String())
	}
}

// TestServer_ClaimAndRelease_Follower claims without agents (the fake
// plugin needs no controller) and releases with the claim worker off,
// as on a follower: the claim becomes a past claim and stays there.
func TestServer_ClaimAndRelease_Follower(t *testing.T) {
	ts := startServer(t, server.Config{Follower: true})
	fakeNode(t, ts, "n1")
	registerFakeVolume(t, ts, "db", nil)
	ctx := context.Background()
	c := ts.client
	r, err := c.Claim(ctx, "default", "db", &api.ClaimRequest{AllocationID: "web-1", NodeID: "n1", Mode: csi.ClaimWrite})
	must(t, err)
	if r.Claim.State != csi.ClaimTaken || r.ControllerNodeID != "" || r.Mount != nil {
		t.Errorf("claim %+v: want taken, no controller call, no mount", r)
	}
	// Repeating the claim is idempotent.
	if _, err := c.Claim(ctx, "default", "db", &api.ClaimRequest{AllocationID: "web-1", NodeID: "n1", Mode: csi.ClaimWrite}); err != nil {
		t.Fatalf("repeated claim: %v", err)
	}
	// The allocation cannot move to another node.
	fakeNode(t, ts, "n2")
	if _, err := c.Claim(ctx, "default", "db", &api.ClaimRequest{AllocationID: "web-1", NodeID: "n2", Mode: csi.ClaimWrite}); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Errorf("claim from another node: got %v, want csi.ErrInvalidRequest", err)
	}

	rel, err := c.Release(ctx, "web-1")
	must(t, err)
	if !rel.Allocation.Terminal || len(rel.Claims) != 1 || rel.Claims[0].Claim.State != csi.ClaimUnpublishing {
		t.Fatalf("release %+v: want a terminal allocation with one unpublishing claim", rel)
	}
	// A terminal allocation takes no new claim.
	if _, err := c.Claim(ctx, "default", "db", &api.ClaimRequest{AllocationID: "web-1", NodeID: "n1", Mode: csi.ClaimWrite}); !errors.Is(err, csi.ErrAllocationTerminal) {
		t.Errorf("claim after release: got %v, want csi.ErrAllocationTerminal", err)
	}
	// Releasing again changes nothing.
	if rel2, err := c.Release(ctx, "web-1"); err != nil || rel2.Index != 0 {
		t.Errorf("second release: index %v, %v; want no write", rel2, err)
	}
	must(t, ts.srv.Settle(ctx))
	claims, _, err := c.AllocationClaims(ctx, "web-1", nil)
	must(t, err)
	if len(claims) != 1 || claims[0].Claim.State != csi.ClaimUnpublishing {
		t.Errorf("a follower released the claim: %+v", claims)
	}
	if st := ts.srv.WorkerStats(); st.Enabled || st.Freed != 0 {
		t.Errorf("worker stats %+v: want disabled, nothing freed", st)
	}
	if _, err := c.DeleteVolume(ctx, "default", "db"); !errors.Is(err, csi.ErrVolumeInUse) {
		t.Errorf("delete of a volume with a past claim: got %v, want csi.ErrVolumeInUse", err)
	}
	if _, err := c.DeregisterVolume(ctx, "default", "db", true); err != nil {
		t.Errorf("forced deregister: %v", err)
	}
}

// TestServer_BlockingQuery checks that a blocking query answers on a
// change, and with the current data when its wait ends.
func TestServer_BlockingQuery(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	_, _, err := ts.client.Plugins(ctx, nil)
	must(t, err)
	got := make(chan *csi.Plugin, 1)
	go func() {
		// WaitPlugin loops on blocking queries until the plugin is there.
		p, err := ts.client.WaitPlugin(ctx, "fake", func(p *csi.Plugin) bool { return p != nil && p.NodesHealthy == 1 })
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	fakeNode(t, ts, "n1") // the change the query waits for
	if p := <-got; p == nil || p.NodesExpected != 1 {
		t.Fatalf("plugin %+v: want fake with one healthy, expected node", p)
	}

	_, meta, err := ts.client.Plugins(ctx, nil)
	must(t, err)
	ps, meta2, err := ts.client.Plugins(ctx, &api.QueryOptions{WaitIndex: meta.Index, WaitTime: time.Millisecond})
	must(t, err)
	if len(ps) != 1 || meta2.Index != meta.Index {
		t.Errorf("after the wait: %d plugins at index %d; want the same one at %d", len(ps), meta2.Index, meta.Index)
	}
}

// TestServer_BlockingQuery_EndsOnStop checks that a stopping server
// answers the blocking queries it holds at once. The API is served by
// the test's own HTTP server, which Run does not stop, so only the
// server's stop can end the hour-long query.
func TestServer_BlockingQuery_EndsOnStop(t *testing.T) {
	srv, err := server.New(server.Config{})
	must(t, err)
	entered := make(chan struct{}, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		srv.Handler().ServeHTTP(w, r)
	}))
	defer hs.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, lis) }()
	c, err := api.NewClient(hs.URL, nil)
	must(t, err)
	defer c.Close()
	answered := make(chan error, 1)
	go func() {
		_, _, err := c.Volumes(context.Background(), "", "", &api.QueryOptions{WaitIndex: 1 << 40, WaitTime: time.Hour})
		answered <- err
	}()
	<-entered
	cancel()
	must(t, <-done)
	if err := <-answered; err != nil {
		t.Errorf("the held query failed instead of being answered: %v", err)
	}
}

// TestServer_Nodes_PluginAllocations checks that a node's registration
// makes its plugin instances expected, and that a plugin it no longer
// lists is stopped and forgotten.
func TestServer_Nodes_PluginAllocations(t *testing.T) {
	ts := startServer(t, server.Config{HeartbeatTTL: 10 * time.Second})
	ctx := context.Background()
	fakeNode(t, ts, "n1")
	fakeNode(t, ts, "n2")
	p, _, err := ts.client.Plugin(ctx, "fake", nil)
	must(t, err)
	if p.NodesHealthy != 2 || p.NodesExpected != 2 || len(p.Allocations) != 2 {
		t.Fatalf("plugin %+v: want 2/2 nodes and two plugin allocations", p)
	}
	// A workload on n2 holds a claim: its allocation is not the agent's
	// to report, and survives the node's registrations.
	registerFakeVolume(t, ts, "db", nil)
	_, err = ts.client.Claim(ctx, "default", "db", &api.ClaimRequest{AllocationID: "web-1", NodeID: "n2", Mode: csi.ClaimWrite})
	must(t, err)
	// n2 comes back without the plugin.
	must(t, ts.client.RegisterNode(ctx, "n2", &api.RegisterNodeRequest{Address: "127.0.0.1:1"}))
	p, _, err = ts.client.Plugin(ctx, "fake", nil)
	must(t, err)
	if p.NodesHealthy != 1 || p.NodesExpected != 1 {
		t.Errorf("after n2 dropped the plugin: nodes %d/%d, want 1/1", p.NodesHealthy, p.NodesExpected)
	}
	v, _, err := ts.client.Volume(ctx, "default", "db", nil)
	must(t, err)
	if c := v.WriteClaims["web-1"]; c == nil || c.State != csi.ClaimTaken || len(v.PastClaims) != 0 {
		t.Errorf("after n2 re-registered: write claims %v, past claims %v; want web-1's claim taken", v.WriteClaims, v.PastClaims)
	}
	// And lists it again: the forgotten allocation ID is free again.
	fakeNode(t, ts, "n2")
	p, _, err = ts.client.Plugin(ctx, "fake", nil)
	must(t, err)
	if p.NodesHealthy != 2 || p.NodesExpected != 2 {
		t.Errorf("after n2 listed the plugin again: nodes %d/%d, want 2/2", p.NodesHealthy, p.NodesExpected)
	}

	// Liveness: n1 heartbeats, n2 goes silent past the TTL.
	ts.advance(11 * time.Second)
	must(t, ts.client.Heartbeat(ctx, "n1"))
	nodes, err := ts.client.Nodes(ctx)
	must(t, err)
	status := map[string]csi.NodeStatus{}
	for _, n := range nodes {
		status[n.ID] = n.Status
		if len(n.Plugins) != 1 {
			t.Errorf("node %s lists %d plugins, want 1", n.ID, len(n.Plugins))
		}
	}
	if status["n1"] != csi.NodeStatusReady || status["n2"] != csi.NodeStatusDown {
		t.Errorf("statuses %v, want n1 ready and n2 down", status)
	}
	if st, _ := ts.srv.NodeStatus(ctx, "n2"); st != csi.NodeStatusDown {
		t.Errorf("NodeStatus(n2) = %s, want down", st)
	}
	requireLine(t, ts.out.String(), "[server] node n1 registered, node service at 127.0.0.1:1")
	requireLine(t, ts.out.String(), "[server] node n1: plugin fake (node) healthy, fake.csikit.io 1.0")
}

func requireLine(t *testing.T, out, want string) {
	t.Helper()
	if !strings.Contains(out, want+"\n") {
		t.Errorf("no line %q in:\n%s", want, out)
	}
}

func TestServer_SetLeader(t *testing.T) {
	ts := startServer(t, server.Config{Follower: true})
	if ts.srv.WorkerStats().Enabled {
		t.Fatal("a follower's claim worker is enabled")
	}
	ts.srv.SetLeader(true)
	if !ts.srv.WorkerStats().Enabled {
		t.Error("SetLeader(true) did not enable the claim worker")
	}
	ts.srv.SetLeader(false)
	if ts.srv.WorkerStats().Enabled {
		t.Error("SetLeader(false) did not disable the claim worker")
	}
	requireLine(t, ts.out.String(), "[server] leading: the claim release worker is on")
	requireLine(t, ts.out.String(), "[server] following: the claim release worker is off")
}

// TestServer_Place answers per node, with the volume's only capability
// and namespace as defaults, and writes nothing.
func TestServer_Place(t *testing.T) {
	ts := startServer(t, server.Config{})
	fakeNode(t, ts, "n1")
	fakeNode(t, ts, "n2")
	registerFakeVolume(t, ts, "db", nil, snwFS)
	ctx := context.Background()
	resp, err := ts.client.Place(ctx, "default", "db", &api.PlaceRequest{Mode: csi.ClaimWrite, Nodes: []string{"n2", "n3"}})
	must(t, err)
	if len(resp.Nodes) != 2 || resp.Nodes[0].NodeID != "n2" || resp.Nodes[0].Reasons != 0 ||
		resp.Nodes[1].NodeID != "n3" || resp.Nodes[1].Reasons != csi.ReasonNoNodePlugin {
		t.Fatalf("place: %+v", resp.Nodes)
	}
	other, err := ts.client.Place(ctx, "default", "db", &api.PlaceRequest{Namespace: "other", Mode: csi.ClaimWrite})
	must(t, err)
	for _, n := range other.Nodes {
		if !n.Reasons.Has(csi.ReasonNamespace) {
			t.Errorf("node %s: %v, want namespace for an allocation of another namespace", n.NodeID, n.Reasons)
		}
	}
	v, _, err := ts.client.Volume(ctx, "default", "db", nil)
	must(t, err)
	if v.InUse() {
		t.Errorf("place wrote a claim: %+v", v)
	}
}
