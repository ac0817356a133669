// Command hostpathplugin runs the hostpath CSI plugin (package hostpath):
// volumes are directories under a data dir, published with bind mounts
// (as root) or symbolic links (as any user). It is a demo and a test
// subject, not production storage. README.md lists every flag and mode.
//
// # Usage
//
//  1. Pick a data dir, which holds the volumes and the plugin's state,
//     and a socket path (see the example below).
//  2. Choose what it serves with -mode: monolith (the default) for one
//     plugin; controller, and node with -split-node, on two sockets that
//     share one data dir, for a split plugin; node alone for a node-only
//     plugin. -controller-publish=false and -staging=false turn the
//     optional capabilities off.
//  3. Run it as root for real bind mounts; as a normal user it falls back
//     to symbolic links (-mount auto) and says so.
//  4. Point a CO at the socket (csikit's node agent, csicheck, or any CSI
//     client). SIGINT or SIGTERM stops it gracefully; the socket is
//     removed on exit and the volumes stay in the data dir.
//
// For example:
//
//	go run ./examples/hostpathplugin -endpoint /tmp/hostpath.sock -data-dir /tmp/hostpath -node-id node-1
//
// Exit status: 0 after a clean stop, 1 when serving failed, 2 for bad
// flags or a Config the plugin refuses.
package main
