// Package split runs the Kubernetes CSI sanity suite against the hostpath
// plugin deployed as a controller plugin and a node plugin on separate
// sockets, sharing a data dir (see sanitytest). It holds only its test.
//
// # Usage
//
//  1. Run its test: go test ./examples/hostpathplugin/sanitytest/split
//     (go test ./... runs it too, beside monolith: Ginkgo runs one suite
//     per process).
//  2. As root the node plugin publishes with bind mounts; as a normal
//     user it uses symbolic links, which the suite also passes.
//  3. A failure names the sanity spec that failed, as Ginkgo reports it;
//     the test also fails if a bind mount was left behind.
package split
