// Package sanitytest runs the Kubernetes CSI sanity suite
// (github.com/kubernetes-csi/csi-test/v5/pkg/sanity) against the hostpath
// plugin, served in-process on real unix sockets, as one monolith or as a
// controller plugin and a node plugin sharing a data dir.
//
// The suite is a Ginkgo suite, and Ginkgo runs one suite per process, so
// each layout has its own test package (monolith, split, zonal,
// zonalsplit) that calls Run; `go test ./...` runs them all, side by
// side.
//
// # Usage
//
//  1. In a test, call Run(t, Monolith) or Run(t, Split), optionally
//     with options such as Zonal (a topology and a capacity).
//  2. Run serves the plugin with ControllerPublish and staging on, a
//     MaxVolumes limit, and real bind mounts when the process may
//     bind-mount (as root). Without that it uses the symlink fallback:
//     the suite passes on it too, because it checks paths, not mounts.
//  3. Run stops the plugins when the suite ends and fails the test if a
//     bind mount was left behind under its directories.
package sanitytest
