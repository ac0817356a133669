// Package zonalsplit runs the Kubernetes CSI sanity suite against the
// hostpath plugin deployed as a controller plugin and a node plugin that
// share a data dir, both with a topology and a capacity
// (sanitytest.Zonal, the -topology and -capacity flags). It holds only
// its test.
package zonalsplit
