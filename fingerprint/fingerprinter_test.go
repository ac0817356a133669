package fingerprint_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/fingerprint"
)

// newFingerprinter returns a Fingerprinter for p over a real client.
func newFingerprinter(tb testing.TB, p *csitest.Plugin, typ csi.PluginType, clk clock.Clock) (*fingerprint.Fingerprinter, *plugin.Client) {
	tb.Helper()
	client, err := plugin.New(plugin.Config{Endpoint: p.Endpoint(), MaxRetries: -1})
	must.NoError(tb, err)
	tb.Cleanup(func() { _ = client.Close() })
	f, err := fingerprint.NewFingerprinter(fingerprint.FingerprinterConfig{
		PluginID: "p", AllocationID: "a1", Type: typ,
		Client: client, Socket: p.Endpoint(), Clock: clk, StaticRefresh: time.Hour,
	})
	must.NoError(tb, err)
	return f, client
}

func TestNewFingerprinter_InvalidConfig(t *testing.T) {
	client, err := plugin.New(plugin.Config{Endpoint: "/nonexistent/csi.sock"})
	must.NoError(t, err)
	defer func() { _ = client.Close() }()
	cases := []struct {
		name string
		cfg  fingerprint.FingerprinterConfig
		is   error
	}{
		{"no plugin", fingerprint.FingerprinterConfig{AllocationID: "a", Type: csi.PluginTypeNode, Client: client}, csi.ErrInvalidID},
		{"no allocation", fingerprint.FingerprinterConfig{PluginID: "p", Type: csi.PluginTypeNode, Client: client}, csi.ErrInvalidID},
		{"bad type", fingerprint.FingerprinterConfig{PluginID: "p", AllocationID: "a", Client: client}, csi.ErrInvalidRequest},
		{"no client", fingerprint.FingerprinterConfig{PluginID: "p", AllocationID: "a", Type: csi.PluginTypeNode}, csi.ErrInvalidRequest},
		{"negative refresh", fingerprint.FingerprinterConfig{PluginID: "p", AllocationID: "a", Type: csi.PluginTypeNode, Client: client, StaticRefresh: -1}, csi.ErrInvalidRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := fingerprint.NewFingerprinter(tc.cfg)
			check.Nil(t, f)
			check.ErrorIs(t, err, tc.is)
		})
	}
}

func TestFingerprinter_Fingerprint_Caching(t *testing.T) {
	static := []string{csitest.MethodGetPluginInfo, csitest.MethodGetPluginCapabilities, csitest.MethodNodeGetInfo}
	steady := []string{csitest.MethodProbe, csitest.MethodNodeGetCapabilities}
	p := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode})
	clk := clock.NewFake(time.Unix(1e9, 0))
	f, client := newFingerprinter(t, p, csi.PluginTypeNode, clk)
	ctx := t.Context()

	cycle := func(t *testing.T, want ...string) {
		t.Helper()
		p.ResetCalls()
		info, err := f.Fingerprint(ctx)
		must.NoError(t, err)
		must.True(t, info.Healthy)
		check.ElementsMatch(t, want, p.Methods())
	}
	steps := []struct {
		name   string
		before func()
		want   []string
	}{
		{"first cycle asks everything", nil, append(static, steady...)},
		{"steady cycle asks Probe and capabilities", nil, steady},
		{"still cached just before the refresh", func() { clk.Advance(time.Hour - time.Nanosecond) }, steady},
		{"slow refresh", func() { clk.Advance(time.Nanosecond) }, append(static, steady...)},
		{"cached again", nil, steady},
		{"Invalidate", f.Invalidate, append(static, steady...)},
		{"after a failed cycle", func() {
			p.FailNext(csitest.MethodNodeGetCapabilities, codes.Unavailable, 1)
			_, err := f.Fingerprint(ctx)
			must.Error(t, err)
		}, append(static, steady...)},
		{"after a restart", func() {
			// Seen up before and after: only the new socket file tells
			// that the plugin restarted.
			must.NoError(t, p.Restart())
			reconnect(t, client)
		}, append(static, steady...)},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.before != nil {
				s.before()
			}
			cycle(t, s.want...)
		})
	}
}

func TestFingerprinter_Fingerprint_Controller(t *testing.T) {
	p := csitest.Start(t, csitest.Config{
		Type: csi.PluginTypeController, Controller: csi.ControllerCapabilities{PublishUnpublishVolume: true},
	})
	f, _ := newFingerprinter(t, p, csi.PluginTypeController, clock.NewFake(time.Unix(1e9, 0)))
	info, err := f.Fingerprint(t.Context())
	must.NoError(t, err)
	check.True(t, info.RequiresController)
	check.Nil(t, info.NodeInfo, "a controller instance has no node info")
	must.NotNil(t, info.ControllerInfo)
	check.True(t, info.ControllerInfo.Capabilities.PublishUnpublishVolume)
	check.Zero(t, p.CallCount(csitest.MethodNodeGetInfo))

	p.ResetCalls()
	_, err = f.Fingerprint(t.Context())
	must.NoError(t, err)
	check.ElementsMatch(t, []string{csitest.MethodProbe, csitest.MethodControllerGetCapabilities}, p.Methods())
}

func TestFingerprinter_Fingerprint_Failures(t *testing.T) {
	cases := []struct {
		name   string
		fault  func(p *csitest.Plugin)
		is     error
		code   csi.Code
		reason string
	}{
		{"probe not ready", func(p *csitest.Plugin) { p.SetProbeReady(false) }, csi.ErrPluginUnhealthy, csi.CodeUnknown, "not ready"},
		{"probe unavailable", func(p *csitest.Plugin) { p.FailAlways(csitest.MethodProbe, codes.Unavailable) }, nil, csi.CodeUnavailable, "Probe: Unavailable"},
		{"plugin info fails", func(p *csitest.Plugin) { p.FailAlways(csitest.MethodGetPluginInfo, codes.Internal) }, nil, csi.CodeInternal, "GetPluginInfo: Internal"},
		{"node info fails", func(p *csitest.Plugin) { p.FailAlways(csitest.MethodNodeGetInfo, codes.Internal) }, nil, csi.CodeInternal, "NodeGetInfo: Internal"},
		{"capabilities fail", func(p *csitest.Plugin) { p.FailAlways(csitest.MethodNodeGetCapabilities, codes.Aborted) }, nil, csi.CodeAborted, "NodeGetCapabilities: Aborted"},
		{"socket gone", func(p *csitest.Plugin) { p.Stop() }, csi.ErrUnavailable, csi.CodeUnknown, "does not exist"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode, Name: "prov"})
			clk := clock.NewFake(time.Unix(1e9, 0))
			f, _ := newFingerprinter(t, p, csi.PluginTypeNode, clk)
			_, err := f.Fingerprint(t.Context())
			must.NoError(t, err)
			clk.Advance(time.Second)

			f.Invalidate() // so that the static questions are asked too
			tc.fault(p)
			info, err := f.Fingerprint(t.Context())
			must.Error(t, err)
			must.NotNil(t, info)
			check.False(t, info.Healthy)
			check.Contains(t, info.HealthDescription, tc.reason)
			check.Contains(t, err.Error(), tc.reason)
			check.Contains(t, err.Error(), `"p"`, "the error names the plugin")
			check.Equal(t, clk.Now(), info.UpdateTime)
			check.Equal(t, "prov", info.Provider, "what was known stays")
			if tc.is != nil {
				check.ErrorIs(t, err, tc.is)
			}
			check.Equal(t, tc.code, csi.CodeOf(err))
		})
	}
}

// BenchmarkFingerprinter_SteadyState measures the plugin RPCs one
// fingerprint of a healthy node plugin makes once its static answers are
// cached.
func BenchmarkFingerprinter_SteadyState(b *testing.B) {
	p := csitest.Start(b, csitest.Config{Type: csi.PluginTypeNode, Node: csi.NodeCapabilities{StageUnstageVolume: true}})
	f, _ := newFingerprinter(b, p, csi.PluginTypeNode, clock.NewFake(time.Unix(1e9, 0)))
	ctx := b.Context()
	if _, err := f.Fingerprint(ctx); err != nil {
		b.Fatal(err)
	}
	p.ResetCalls()
	b.ResetTimer()
	for range b.N {
		if _, err := f.Fingerprint(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	calls := len(p.Calls())
	b.ReportMetric(float64(calls)/float64(b.N), "rpcs/cycle")
	b.ReportMetric(float64(p.CallCount(csitest.MethodNodeGetInfo))/float64(b.N), "nodegetinfo/cycle")
}

func TestFingerprinter_Fingerprint_ExpansionCapabilities(t *testing.T) {
	for _, tt := range []struct {
		name            string
		offline         bool
		online, offOnly bool
	}{
		{"online", false, true, false},
		{"offline", true, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := csitest.Start(t, csitest.Config{
				Type: csi.PluginTypeController, OfflineExpansion: tt.offline,
				Controller: csi.ControllerCapabilities{ExpandVolume: true},
			})
			f, _ := newFingerprinter(t, p, csi.PluginTypeController, clock.NewFake(time.Unix(1e9, 0)))
			info, err := f.Fingerprint(t.Context())
			must.NoError(t, err)
			check.Equal(t, tt.online, info.OnlineExpansion)
			check.Equal(t, tt.offOnly, info.OfflineExpansion)
			pl := &csi.Plugin{Controllers: map[string]*csi.PluginInfo{"n1": info}}
			check.Equal(t, tt.offOnly, pl.ExpansionMode().OfflineOnly())
			check.True(t, pl.ExpansionMode().Controller)
		})
	}
}
