// Package zonal runs the Kubernetes CSI sanity suite against the hostpath
// plugin deployed as one monolith plugin with a topology and a capacity
// (sanitytest.Zonal, the -topology and -capacity flags). It holds only
// its test.
package zonal
