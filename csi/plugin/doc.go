// Package plugin is csikit's gRPC client of one CSI plugin socket. It
// speaks the Identity, Controller and Node services in csikit's own types
// (package csi) and keeps the CSI spec's protobuf messages to itself:
// every conversion lives in the convert*.go files; convert_legacy.go
// reads the fields that plugins of spec 1.12 and earlier send and spec
// 1.13 removed (the volume condition of ControllerGetVolume).
//
// # Usage
//
//  1. New(Config{Endpoint: "unix:///csi/csi.sock"}) validates the config
//     and returns a *Client without connecting; the first call connects.
//  2. Call methods with a ctx. A call made before the plugin listens
//     waits for the socket, bounded by ctx and Config.CallTimeout, so a
//     host may start a plugin and its client at the same time.
//  3. Depend on the narrowest interface: IdentityClient, ControllerClient
//     or NodeClient. *Client implements all three.
//  4. Close the client when the plugin goes away.
//
// # Requests
//
// Each request is validated before it is sent: IDs present and at most
// 128 bytes, node paths absolute without "..", capabilities defined,
// a CSI node ID for ControllerPublishVolume, no mount options on a block
// capability. A malformed request returns a *RequestError, which matches
// csi.ErrInvalidRequest, and no RPC is made.
//
// # Timeouts and retries
//
// Config.CallTimeout (DefaultCallTimeout, two minutes) bounds a whole
// method call, retries and backoff included; the caller's ctx may end it
// sooner. Two minutes lets a slow back end attach or format a disk and
// still ends a call to a plugin that hangs.
//
// A call that fails with a Retryable code (Unavailable, ResourceExhausted,
// Aborted: the plugin did not act) is retried up to Config.MaxRetries
// times (DefaultMaxRetries, three), waiting Config.Backoff's delays
// (exponential with jitter) on Config.Clock between attempts. Final codes
// are returned at once. Uncertain codes (DeadlineExceeded, Canceled: the
// plugin may have acted) are returned at once too, never retried here, so
// the caller can record that the operation may have happened before it
// decides to try again. Longer retry schedules belong to the caller.
//
// Reconnection to a socket that disappears and comes back is grpc's own,
// with a short backoff tuned for a local socket (50ms growing to 1s).
//
// # Errors
//
// A failed RPC returns a *csi.RPCError: Method, the gRPC Code, the
// plugin's Message and, in Err, the gRPC error itself (and the context
// error when the call ran out of time or was canceled). So callers may
// use errors.As with a *csi.RPCError, csi.CodeOf(err), csi.Classify(err)
// (the class comes from csi.ClassOfCode), errors.Is(err,
// context.DeadlineExceeded), or grpc's status.Code(err). A plugin that
// stops in the middle of a call gives Unavailable (Retryable) and the
// call returns; note that the plugin may have acted before it stopped,
// which CSI's idempotent calls make safe to retry. A response the client
// cannot use is a *ResponseError (Final).
//
// # Logging and secrets
//
// With a Config.Logger at trace level, each request and response is
// logged after protosanitizer has stripped its secrets; failed attempts
// and retries are logged at debug level. A plugin's error message is
// scrubbed of the request's secret values before it reaches an error or
// a log line. With the logger above trace level the hot path builds no
// log arguments at all, and above debug level neither does a failed
// attempt.
package plugin
