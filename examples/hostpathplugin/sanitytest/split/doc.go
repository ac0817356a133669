// Package split runs the Kubernetes CSI sanity suite against the hostpath
// plugin deployed as a controller plugin and a node plugin on separate
// sockets, sharing a data dir (see sanitytest). It holds only its test.
package split
