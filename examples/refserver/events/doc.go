// Package events prints the reference server's lifecycle steps as short
// lines a person can follow: "[server] volume demo-vol created …",
// "[node-2] NodeStageVolume ok …". The server, the node agents and the
// demo share one Log, so their lines interleave in the order the steps
// happen.
//
// A Log never sees a secret: callers print IDs, modes and paths only,
// and csi.Secrets redacts itself should one slip into an argument.
package events
