package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/cli"
	"github.com/csikit/csikit/examples/refserver/demo"
	"github.com/csikit/csikit/examples/refserver/events"
	"github.com/csikit/csikit/rpcshim"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		// A child process of a test (see startChild): run the command
		// line as the refserver program would.
		os.Exit(cli.Main(os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

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

func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rsc")
	must(t, err)
	t.Cleanup(func() {
		if left, _ := demo.MountsUnder(dir); len(left) > 0 {
			t.Errorf("mounts left under %s: %v", dir, left)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return dir
}

// cluster is a server and two agents on loopback ports, each agent with
// the hostpath plugin, and a server clock the test moves forward.
type cluster struct {
	*demo.Cluster
	events *syncBuffer
	offset atomic.Int64
}

const ttl = 15 * time.Second

func startCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{events: &syncBuffer{}}
	mount := hostpath.MountSymlink
	if hostpath.CanBindMount() == nil {
		mount = hostpath.MountBind
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dc, err := demo.StartCluster(ctx, demo.ClusterConfig{
		Dir: shortTempDir(t), Mount: mount, HeartbeatTTL: ttl,
		Now:    func() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) },
		Events: events.New(c.events),
	})
	must(t, err)
	c.Cluster = dc
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := dc.Close(ctx); err != nil {
			t.Errorf("cluster close: %v", err)
		}
	})
	return c
}

// run runs the CLI against the cluster's server.
func (c *cluster) run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runCLI(t, append(args, "-address", c.URL())...)
}

func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// ok runs the CLI and fails the test unless it succeeded.
func (c *cluster) ok(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := c.run(t, args...)
	if code != cli.ExitOK {
		t.Fatalf("refserver %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func decodeJSON[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, s)
	}
	return v
}

// columnsAligned checks that in a tabwriter table each of cols starts
// at the same offset in the header and in the row starting with first.
func columnsAligned(t *testing.T, out, first string, cols ...string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	header := lines[0]
	var row string
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, first+" ") {
			row = l
		}
	}
	if row == "" {
		t.Fatalf("no row for %q in:\n%s", first, out)
	}
	for _, c := range cols {
		at := strings.Index(header, c)
		if at < 0 || at >= len(row) || row[at-1] != ' ' || row[at] == ' ' {
			t.Errorf("column %s does not line up:\n%s\n%s", c, header, row)
		}
	}
}

// TestCLI_RegisterClaimStatusRelease drives a volume's life through the
// CLI's functions against a server and two agents on loopback: create
// (to get a plugin volume), deregister, register it, claim and mount it
// on node-2, read the status as JSON and as tables, release it and see
// the claim freed.
func TestCLI_RegisterClaimStatusRelease(t *testing.T) {
	c := startCluster(t)
	const secret = "cli-s3cr3t"

	created := decodeJSON[rpcshim.VolumeResponse](t, c.ok(t, "volume", "create", "-plugin", "hostpath", "-json", "scratch"))
	ext := created.Volume.ExternalID
	if !strings.HasPrefix(ext, "vol-") || created.Volume.Capacity != hostpath.DefaultCapacity {
		t.Fatalf("created volume %+v", created.Volume)
	}
	if created.ControllerNodeID != "node-1" {
		t.Errorf("volume created by the controller on %q, want node-1", created.ControllerNodeID)
	}
	c.ok(t, "volume", "delete", "-deregister", "scratch")

	out := c.ok(t, "volume", "register", "-plugin", "hostpath", "-external-id", ext,
		"-capability", "single-node-writer/file-system", "-secret", "token="+secret, "data")
	if want := "Volume default/data registered with plugin hostpath (external ID " + ext + ")\n"; out != want {
		t.Errorf("register output %q, want %q", out, want)
	}

	claim := decodeJSON[api.ClaimResponse](t, c.ok(t, "claim", "-volume", "data", "-alloc", "web-1", "-node", "node-2", "-mode", "write", "-mount", "-json"))
	if claim.Claim.State != csi.ClaimTaken || claim.Claim.ExternalNodeID != "node-2" || claim.ControllerNodeID != "node-1" {
		t.Errorf("claim %+v: want taken on CSI node node-2, attached by node-1's controller", claim)
	}
	if claim.Mount == nil || claim.Mount.NodeID != "node-2" || claim.Mount.Usage != "w-snw-fs" {
		t.Fatalf("claim mount %+v", claim.Mount)
	}
	must(t, os.WriteFile(filepath.Join(claim.Mount.Path, "f.txt"), []byte("x"), 0o644))

	statusJSON := c.ok(t, "volume", "status", "-json", "data")
	if strings.Contains(statusJSON, secret) {
		t.Errorf("volume status shows the secret:\n%s", statusJSON)
	}
	vol := decodeJSON[csi.Volume](t, statusJSON)
	if cl := vol.WriteClaims["web-1"]; cl == nil || cl.State != csi.ClaimTaken || cl.NodeID != "node-2" {
		t.Fatalf("volume's claims: %+v", vol.WriteClaims)
	}
	if a := vol.Attachments["node-2"]; a == nil || a.State != csi.AttachmentAttached || len(a.PublishContext) == 0 {
		t.Fatalf("volume's attachments: %+v", vol.Attachments)
	}
	if vol.Secrets != nil || !vol.Schedulable || vol.Provider != hostpath.DefaultName {
		t.Errorf("volume %+v: want no secrets, schedulable, provider %s", vol, hostpath.DefaultName)
	}

	text := c.ok(t, "volume", "status", "data")
	for _, want := range []string{"External ID   " + ext, "Schedulable   yes (controllers 1/1, nodes 2/2)", "ALLOCATION  NODE    MODE   STATE"} {
		if !strings.Contains(text, want) {
			t.Errorf("volume status lacks %q:\n%s", want, text)
		}
	}
	columnsAligned(t, text[strings.Index(text, "ALLOCATION"):], "web-1", "NODE", "MODE", "STATE", "CAPABILITY")
	list := c.ok(t, "volume", "status")
	columnsAligned(t, list, "data", "NAMESPACE", "PLUGIN", "SCHEDULABLE", "WRITE")

	plugins := decodeJSON[[]*csi.Plugin](t, c.ok(t, "plugin", "status", "-json"))
	if len(plugins) != 1 || plugins[0].Provider != hostpath.DefaultName || plugins[0].Version != hostpath.DefaultVersion ||
		plugins[0].ControllersHealthy != 1 || plugins[0].ControllersExpected != 1 || plugins[0].NodesHealthy != 2 || plugins[0].NodesExpected != 2 {
		t.Errorf("plugins %+v", plugins)
	}
	ptext := c.ok(t, "plugin", "status")
	columnsAligned(t, ptext, "hostpath", "PROVIDER", "VERSION", "CONTROLLERS", "NODES", "SCHEDULABLE")
	if !strings.Contains(ptext, "hostpath  hostpath.csikit.io  0.1.0    1/1          2/2    yes") {
		t.Errorf("plugin status:\n%s", ptext)
	}
	if detail := c.ok(t, "plugin", "status", "hostpath"); !strings.Contains(detail, "node-2  node        node      yes      node-2") {
		t.Errorf("plugin detail:\n%s", detail)
	}

	// A volume still claimed cannot be deleted.
	if _, errOut, code := c.run(t, "volume", "delete", "data"); code != cli.ExitError || !strings.Contains(errOut, "volume in use") {
		t.Errorf("delete of a claimed volume: exit %d, %s", code, errOut)
	}

	out, errOut, code := c.run(t, "release", "-wait", "web-1")
	if code != cli.ExitOK || errOut != "" {
		t.Fatalf("release -wait: exit %d; stderr (no progress lines when it is not a terminal):\n%q", code, errOut)
	}
	if out != "Allocation web-1 stopped; its claims are released and freed\n" {
		t.Errorf("release output %q", out)
	}
	vol = decodeJSON[csi.Volume](t, c.ok(t, "volume", "status", "data", "-json"))
	if vol.InUse() {
		t.Fatalf("the claim is not freed: %+v", vol)
	}
	if text := c.ok(t, "volume", "status", "data"); !strings.Contains(text, "No claims") {
		t.Errorf("volume status after the release:\n%s", text)
	}
	if _, err := os.Lstat(claim.Mount.Path); !os.IsNotExist(err) {
		t.Errorf("the mount target is still there: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(c.PluginDataDir(), "volumes", ext, "f.txt")); err != nil || string(b) != "x" {
		t.Errorf("the file written through the mount: %q, %v", b, err)
	}
	c.ok(t, "volume", "delete", "data")
	if want := "[server] volume default/data deleted by the controller on node-1 and deregistered"; !strings.Contains(c.events.String(), want) {
		t.Errorf("no lifecycle line %q:\n%s", want, c.events.String())
	}
	if _, errOut, code := c.run(t, "volume", "status", "data"); code != cli.ExitError || !strings.Contains(errOut, "volume not found") {
		t.Errorf("status of a deleted volume: exit %d, %s", code, errOut)
	}
	if strings.Contains(c.events.String(), secret) {
		t.Errorf("a lifecycle line shows the secret:\n%s", c.events.String())
	}
}

// TestCLI_NodeStatus_HeartbeatExpired stops node-2's agent: it leaves,
// and node-2 shows as down at once, without the server's clock moving.
// Then the clock moves past the heartbeat TTL: node-1 (which
// heartbeats) shows as ready, and a claim on node-2 is refused.
func TestCLI_VolumeHealth(t *testing.T) {
	c := startCluster(t)
	c.ok(t, "volume", "create", "-plugin", "hostpath", "data")
	if out := c.ok(t, "volume", "health"); out != "No abnormal volumes\n" {
		t.Errorf("volume health = %q", out)
	}
	if out := c.ok(t, "volume", "status", "data"); !strings.Contains(out, "Health: nothing reported") {
		t.Errorf("volume status shows no health line:\n%s", out)
	}
	if got := decodeJSON[[]any](t, c.ok(t, "volume", "health", "-all", "-json")); len(got) != 0 {
		t.Errorf("health records of a new volume: %v", got)
	}
	// The demo's agents emit their plugin calls into the server's
	// metrics: plugin status shows them with their error rate.
	out := c.ok(t, "plugin", "status", "hostpath")
	if !regexp.MustCompile(`(?m)^CreateVolume +1 +0 +0\.0%$`).MatchString(out) {
		t.Errorf("plugin status shows no RPC error rates:\n%s", out)
	}
}

func TestCLI_NodeStatus_HeartbeatExpired(t *testing.T) {
	c := startCluster(t)
	nodes := decodeJSON[[]*api.Node](t, c.ok(t, "node", "status", "-json"))
	if len(nodes) != 2 || nodes[0].Status != csi.NodeStatusReady || nodes[1].Status != csi.NodeStatusReady {
		t.Fatalf("nodes at start: %+v", nodes)
	}
	must(t, c.StopAgent("node-2"))
	nodes = decodeJSON[[]*api.Node](t, c.ok(t, "node", "status", "-json"))
	if len(nodes) != 2 || nodes[1].ID != "node-2" || nodes[1].Status != csi.NodeStatusDown {
		t.Fatalf("nodes right after node-2's agent stopped: %+v; want node-2 down at once", nodes)
	}
	if !strings.Contains(c.events.String(), "[server] node node-2 left: its agent stopped") {
		t.Errorf("the server does not say node-2 left:\n%s", c.events)
	}
	c.offset.Add(int64(ttl + time.Second))
	must(t, c.Agent("node-1").Heartbeat(context.Background()))

	nodes = decodeJSON[[]*api.Node](t, c.ok(t, "node", "status", "-json"))
	got := map[string]csi.NodeStatus{}
	for _, n := range nodes {
		got[n.ID] = n.Status
	}
	if got["node-1"] != csi.NodeStatusReady || got["node-2"] != csi.NodeStatusDown {
		t.Fatalf("statuses %v: want node-1 ready, node-2 down", got)
	}
	text := c.ok(t, "node", "status")
	columnsAligned(t, text, "node-2", "STATUS", "ADDRESS", "LAST HEARTBEAT")
	if !strings.Contains(text, "node-2  down") || !strings.Contains(text, "node-1  ready") {
		t.Errorf("node status:\n%s", text)
	}
	// node-2's plugin went away with its agent: the plugin shows one
	// node of the two expected.
	p := decodeJSON[csi.Plugin](t, c.ok(t, "plugin", "status", "-json", "hostpath"))
	if p.NodesHealthy != 1 || p.NodesExpected != 2 {
		t.Errorf("plugin nodes %d/%d, want 1/2", p.NodesHealthy, p.NodesExpected)
	}
	c.ok(t, "volume", "create", "-plugin", "hostpath", "v")
	_, errOut, code := c.run(t, "claim", "-volume", "v", "-alloc", "web-9", "-node", "node-2")
	if code != cli.ExitError || !strings.Contains(errOut, "node-2") {
		t.Errorf("claim on the down node: exit %d, %s", code, errOut)
	}
}

// TestCLI_AgentMode runs a third agent through the CLI's agent command
// against the cluster's server; it joins, its plugin becomes healthy,
// its own /v1/metrics (-metrics-addr) counts its plugin calls, and it
// stops cleanly when its ctx ends.
func TestCLI_AgentMode(t *testing.T) {
	c := startCluster(t)
	dir := shortTempDir(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, []string{"agent", "-server", c.URL(), "-node-id", "node-3", "-addr", "127.0.0.1:0",
			"-data-dir", filepath.Join(dir, "agent"), "-hostpath-data-dir", c.PluginDataDir(), "-hostpath-mode", "node",
			"-hostpath-mount", "symlink", "-metrics-addr", "127.0.0.1:0"}, &out, &errOut)
	}()
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	_, err := c.Client().WaitPlugin(wctx, "hostpath", func(p *csi.Plugin) bool { return p != nil && p.NodesHealthy == 3 })
	if err != nil {
		cancel()
		t.Fatalf("the agent did not join: %v\nstderr:\n%s", err, errOut.String())
	}
	requireAgentMetrics(wctx, t, out.String(), "[node-3] metrics on ",
		`csikit_plugin_rpc_latency_count{code="OK",method="NodeGetInfo",plugin="hostpath"}`)
	cancel()
	if code := <-done; code != cli.ExitOK {
		t.Errorf("agent exit %d\nstderr:\n%s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "[node-3] node service on 127.0.0.1:") {
		t.Errorf("agent output:\n%s", out.String())
	}
}

// requireAgentMetrics scrapes the metrics URL an agent printed after
// prefix and finds series in it with a value of at least 1.
func requireAgentMetrics(ctx context.Context, t *testing.T, out, prefix, series string) {
	t.Helper()
	var url string
	for _, l := range strings.Split(out, "\n") {
		if u, ok := strings.CutPrefix(l, prefix); ok {
			url = u
		}
	}
	if url == "" {
		t.Fatalf("no %q line in the agent's output:\n%s", prefix, out)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	must(t, err)
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	must(t, err)
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	must(t, err)
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			if n, err := strconv.ParseFloat(v, 64); err == nil && n >= 1 {
				return
			}
		}
	}
	t.Errorf("%s: no %s of at least 1 in:\n%s", url, series, body)
}

// lineWriter hands each line written to it to a function.
type lineWriter struct {
	mu   sync.Mutex
	buf  []byte
	line func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.line(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}

// runServerMode runs the CLI's server command and returns its API URL,
// read from its "listening" line, and a stop function returning its
// exit code and output.
func runServerMode(t *testing.T, args ...string) (string, func() (int, string)) {
	t.Helper()
	urls := make(chan string, 1)
	var all syncBuffer
	out := &lineWriter{line: func(l string) {
		_, _ = io.WriteString(&all, l+"\n")
		if u, ok := strings.CutPrefix(l, "[server] API listening on "); ok {
			urls <- u
		}
	}}
	var errOut syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		if !slices.Contains(args, "-data-dir") {
			args = append([]string{"-dev"}, args...)
		}
		done <- cli.Run(ctx, append([]string{"server", "-addr", "127.0.0.1:0"}, args...), out, &errOut)
	}()
	select {
	case u := <-urls:
		return u, func() (int, string) { cancel(); return <-done, all.String() }
	case code := <-done:
		cancel()
		t.Fatalf("server exited %d\nstderr:\n%s", code, errOut.String())
	}
	return "", nil
}

// TestCLI_ServerMode_CorruptState: a server whose raft state does not
// open stops with an error naming it, rather than starting empty.
func TestCLI_ServerMode_CorruptState(t *testing.T) {
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "raft"), 0o700))
	must(t, os.WriteFile(filepath.Join(dir, "raft", "raft.db"), []byte("garbage"), 0o600))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code := cli.Run(ctx, []string{"server", "-addr", "127.0.0.1:0", "-data-dir", dir}, &out, &errOut)
	if code != cli.ExitError || !strings.Contains(errOut.String(), filepath.Join(dir, "raft")) {
		t.Errorf("exit %d, %s", code, errOut.String())
	}
}

func TestCLI_Demo(t *testing.T) {
	out, errOut, code := runCLI(t, "demo", "-exit-after-demo", "-addr", "127.0.0.1:0", "-mount", "symlink")
	if code != cli.ExitOK || !strings.Contains(out, "[demo] done: created, claimed, mounted, written, released and freed") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// TestCLI_Usage checks the exit codes and messages of bad invocations.
func TestCLI_Usage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		say  string
	}{
		{"help", []string{"help"}, cli.ExitOK, "Usage: refserver"},
		{"unknown command", []string{"frobnicate"}, cli.ExitUsage, `unknown command "frobnicate"`},
		{"volume without subcommand", []string{"volume"}, cli.ExitUsage, "give a subcommand: create, register, delete, status"},
		{"unknown subcommand", []string{"plugin", "list"}, cli.ExitUsage, `unknown subcommand "list"`},
		{"command help", []string{"volume", "status", "-h"}, cli.ExitOK, "Usage: refserver volume status [flags] [ID]"},
		{"too many arguments", []string{"volume", "status", "a", "b"}, cli.ExitUsage, "got 2 arguments"},
		{"claim without flags", []string{"claim"}, cli.ExitUsage, "-volume, -alloc and -node are required"},
		{"bad claim mode", []string{"claim", "-volume", "v", "-alloc", "a", "-node", "n", "-mode", "rw"}, cli.ExitUsage, `-mode "rw" is not a claim mode; want read or write`},
		{"bad capability", []string{"volume", "create", "-plugin", "p", "-capability", "everything", "v"}, cli.ExitUsage, `-capability "everything" is not an access mode; want one of single-node-writer, single-node-reader-only`},
		{"secret without value", []string{"volume", "register", "-secret", "token", "v"}, cli.ExitUsage, "want KEY=VALUE"},
		{"register without plugin", []string{"volume", "register", "v"}, cli.ExitUsage, "-plugin and -external-id are required"},
		{"force without deregister", []string{"volume", "delete", "-force", "v"}, cli.ExitUsage, "-force only goes with -deregister"},
		{"bad server address", []string{"volume", "status", "-address", "ftp://x"}, cli.ExitUsage, "is not http://host:port"},
		{"agent without node", []string{"agent", "-hostpath-data-dir", "/tmp/x"}, cli.ExitUsage, "-node-id is required"},
		{"agent without plugins", []string{"agent", "-node-id", "n1"}, cli.ExitUsage, "give at least one -plugin"},
		{"agent with a bad plugin", []string{"agent", "-node-id", "n1", "-plugin", "x"}, cli.ExitUsage, "want ID=ENDPOINT[:TYPE]"},
		{"server with arguments", []string{"server", "extra"}, cli.ExitUsage, "all settings are flags"},
		{"server with a bad log level", []string{"server", "-log-level", "loud"}, cli.ExitUsage, `-log-level "loud"`},
		{"demo with a bad flag", []string{"-no-such-flag"}, cli.ExitUsage, "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runCLI(t, tt.args...)
			if code != tt.code || !strings.Contains(out+errOut, tt.say) {
				t.Errorf("exit %d, want %d; output should say %q:\nstdout:\n%s\nstderr:\n%s", code, tt.code, tt.say, out, errOut)
			}
		})
	}
}

func TestCLI_ServerUnreachable(t *testing.T) {
	// Nothing listens on port 1 of loopback.
	_, errOut, code := runCLI(t, "plugin", "status", "-address", "127.0.0.1:1")
	if code != cli.ExitError || !strings.Contains(errOut, "is it running?") {
		t.Errorf("exit %d, %s", code, errOut)
	}
}

// TestCLI_ServerMode_AddressInUse: a busy port names the flag that
// moves the server elsewhere.
func TestCLI_ServerMode_AddressInUse(t *testing.T) {
	busy := listenLoopback(t)
	defer busy.Close()
	_, errOut, code := runCLI(t, "server", "-dev", "-addr", busy.Addr().String())
	if code != cli.ExitError || !strings.Contains(errOut, busy.Addr().String()+" is in use by another process: pass -addr HOST:PORT to listen elsewhere") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// TestCLI_Completion_OffersEveryCommand: the completion script offers
// every top-level command the help lists.
func TestCLI_Completion_OffersEveryCommand(t *testing.T) {
	help, _, code := runCLI(t, "-h")
	if code != cli.ExitOK {
		t.Fatalf("refserver -h: exit %d", code)
	}
	script, _, code := runCLI(t, "completion", "bash")
	if code != cli.ExitOK {
		t.Fatalf("refserver completion bash: exit %d", code)
	}
	commands, _, _ := strings.Cut(help, "\nExample:")
	listed := regexp.MustCompile(`(?m)^  ([a-z]+) `).FindAllStringSubmatch(commands, -1)
	offered := regexp.MustCompile(`compgen -W "([^"]*)"`).FindStringSubmatch(script)
	if len(listed) == 0 || offered == nil {
		t.Fatalf("no commands in the help (%d) or the script (%q)", len(listed), offered)
	}
	for _, m := range listed {
		if !slices.Contains(strings.Fields(offered[1]), m[1]) {
			t.Errorf("the help lists %q; completion offers only %q", m[1], offered[1])
		}
	}
}
