// Package monolith runs the Kubernetes CSI sanity suite against the
// hostpath plugin deployed as one monolith plugin (see sanitytest). It
// holds only its test.
package monolith
