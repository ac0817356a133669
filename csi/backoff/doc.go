// Package backoff computes capped exponential backoff with jitter, the one
// retry schedule every csikit retry loop uses. It is public because
// Configs (csi/plugin, fingerprint) take a Policy.
package backoff
