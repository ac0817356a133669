// Package fingerprint is the node's plugin registry: it keeps a client of
// every CSI plugin instance running on the node, fingerprints each one
// (what it is, what it can do, whether it is healthy), reports the node's
// plugins to the host, and hands the other node-side parts (the mounter,
// the node endpoint) a client for a plugin by ID.
//
// Two types do the work. Fingerprinter asks one plugin, once per call:
// Probe, ControllerGetCapabilities and/or NodeGetCapabilities every time,
// and GetPluginInfo, GetPluginCapabilities and NodeGetInfo only when its
// cache of those static answers is missing or old (first call, after a
// failure, after the socket file was replaced by a restarted plugin, after
// Config.StaticRefresh). A healthy node plugin thus costs two RPCs per
// cycle. Manager runs one Fingerprinter per registered instance on an
// interval and reports the node's whole list of csi.PluginInfo whenever
// it changes.
//
// # Usage
//
// The host's duties:
//
//  1. Construct a Manager with New and a Config: the node's ID, a Clock
//     (tests pass a clock.Fake), and Report, the function that forwards
//     the node's plugins to the server.
//  2. Start Run(ctx) in a goroutine. It returns once every goroutine of
//     the Manager has stopped, after ctx ends; before returning it reports
//     every plugin it had reported as unhealthy, then an empty list, and
//     closes every plugin client. Run owns the clients that Register
//     creates, so always run a Manager you registered plugins with.
//  3. When an allocation that runs a CSI plugin starts, call Register with
//     the plugin ID, the plugin type (controller, node or monolith), the
//     allocation ID and the plugin's socket path. The socket need not
//     exist yet: the Manager waits for it (Config.SocketWait).
//  4. When that allocation stops, call Deregister. The Manager reports the
//     instance once more, unhealthy, then reports the list without it, and
//     closes its client.
//  5. Forward each Report call to the server, which upserts the node's
//     plugins. Report is called from one goroutine at a time and in order;
//     return an error to have the same (or newer) list sent again with
//     backoff.
//  6. Pass the Manager to the mounter and the node endpoint as their
//     plugin lookup: NodePlugin and ControllerPlugin return a connected
//     client and the plugin's latest fingerprint, or an error wrapping
//     csi.ErrPluginNotFound (retryable) when no instance of the plugin
//     runs here.
//
// Register and Deregister may be called before or while Run runs, from
// any goroutine.
//
// # Timing
//
// After its socket exists, an instance is fingerprinted at once, then
// every Config.Interval while it is healthy. While it is not (its socket
// is missing, a call failed, Probe says "not ready") it is fingerprinted
// again sooner, after Config.Backoff's growing delays, never longer apart
// than the interval, so a plugin that comes back is seen quickly. Each
// fingerprint is bounded by Config.Timeout. All waiting is on Config.Clock.
package fingerprint
