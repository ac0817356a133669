// Package metrics names the metrics csikit's parts emit through
// hashicorp/go-metrics, and holds the small helpers they share. Every
// Config that emits takes a MetricSink (a go-metrics MetricSink: an
// InmemSink, a promsink.Sink, a *metrics.Metrics, a FanoutSink);
// nil turns the metrics off at the cost of one nil check per emit.
//
// Labels stay bounded: plugin IDs, CSI method names, gRPC code names,
// sentinel error codes (csi.Sentinel.Code) and the health event kinds,
// never a volume, node or allocation ID.
package metrics

import (
	"time"

	gometrics "github.com/hashicorp/go-metrics"

	"github.com/csikit/csikit/csi"
)

// Sink is what an emitting part is given; see the package doc.
type Sink = gometrics.MetricSink

// Label is one metric label.
type Label = gometrics.Label

// Metric keys. Counters count events, samples are in milliseconds,
// gauges hold the last value.
var (
	// PluginRPCLatency samples the latency of each plugin call attempt,
	// labels method and code. Its count is the call count (Prometheus:
	// csikit_plugin_rpc_latency_count), so no counter doubles the emit
	// on the plugin client's hot path: with go-metrics' InmemSink a
	// labelled emit costs microseconds of key building.
	PluginRPCLatency = []string{"csikit", "plugin", "rpc_latency"}

	// ClaimsTaken counts claims written; ClaimsRefused those refused,
	// label reason (a sentinel code); ClaimsReleased claims freed by
	// the release worker; ReleaseLatency samples the time from the
	// allocation turning terminal (Claim.ReleasedAt) to the claim
	// freed.
	ClaimsTaken    = []string{"csikit", "claims", "taken"}
	ClaimsRefused  = []string{"csikit", "claims", "refused"}
	ClaimsReleased = []string{"csikit", "claims", "released"}
	ReleaseLatency = []string{"csikit", "claims", "release_latency"}

	// WorkerQueueDepth is the release worker's volumes waiting;
	// WorkerRetries counts release steps that failed and wait to be
	// tried again.
	WorkerQueueDepth = []string{"csikit", "worker", "queue_depth"}
	WorkerRetries    = []string{"csikit", "worker", "retries"}

	// MountsStaged and MountsPublished count the mounter's stages and
	// publications that the node plugin answered OK (NodeStageVolume,
	// NodePublishVolume), label plugin: a volume is staged once for all
	// its publications on a node, and a MountVolume that finds its
	// mount made counts nothing. MountsUnpublished and MountsUnstaged
	// count the teardowns done (NodeUnpublishVolume, NodeUnstageVolume
	// answered OK or NotFound).
	MountsStaged      = []string{"csikit", "mounts", "staged"}
	MountsPublished   = []string{"csikit", "mounts", "published"}
	MountsUnpublished = []string{"csikit", "mounts", "unpublished"}
	MountsUnstaged    = []string{"csikit", "mounts", "unstaged"}

	// HealthResults counts the health monitor's findings, label result
	// (the event kind); HealthPasses counts passes, HealthPassLatency
	// samples their length, and HealthAbnormal is the number of
	// abnormal or missing volumes after the last pass.
	HealthResults     = []string{"csikit", "health", "results"}
	HealthPasses      = []string{"csikit", "health", "passes"}
	HealthPassLatency = []string{"csikit", "health", "pass_latency"}
	HealthAbnormal    = []string{"csikit", "health", "abnormal"}

	// RaftApplyLatency samples the time a replicated host takes to
	// apply one command through its log.
	RaftApplyLatency = []string{"csikit", "raft", "apply_latency"}
)

// Or returns s, or a sink that drops everything when s is nil.
func Or(s Sink) Sink {
	if s == nil {
		return &gometrics.BlackholeSink{}
	}
	return s
}

// Since samples the milliseconds since start under key.
func Since(s Sink, key []string, start time.Time, labels ...Label) {
	s.AddSampleWithLabels(key, float32(time.Since(start).Seconds()*1000), labels)
}

// Reason is the bounded label of an error: its sentinel code, the gRPC
// code of a plugin's error, or "other".
func Reason(err error) string {
	if err == nil {
		return "ok"
	}
	if s := csi.SentinelOf(err); s != nil {
		return s.Code()
	}
	if c := csi.CodeOf(err); c != csi.CodeUnknown {
		return c.String()
	}
	return "other"
}
