// Package monolith runs the Kubernetes CSI sanity suite against the
// hostpath plugin deployed as one monolith plugin (see sanitytest). It
// holds only its test.
//
// # Usage
//
//  1. Run its test: go test ./examples/hostpathplugin/sanitytest/monolith
//     (go test ./... runs it too).
//  2. As root the plugin publishes with bind mounts; as a normal user it
//     uses symbolic links, which the suite also passes.
//  3. A failure names the sanity spec that failed, as Ginkgo reports it;
//     the test also fails if a bind mount was left behind.
package monolith
