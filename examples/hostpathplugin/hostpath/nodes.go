package hostpath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Nodes register through the data dir. A node plugin (ModeNode or
// ModeMonolith) writes its state file, DataDir/node-<digest>.json, which
// names its node ID, when it first serves on a data dir, and the file
// stays when it stops. So the controller knows a node exists when that
// file names it: a node that served once is known while it is down, the
// way a CO's node is known while it reboots, and a node ID no node plugin
// ever used is NotFound. No list of node IDs has to be configured, and
// the controller and its node plugins already share the data dir.

// nodeStatePath is the state file of the node plugin of nodeID.
func nodeStatePath(dataDir, nodeID string) string {
	return filepath.Join(dataDir, nodeFileStem(nodeID)+".json")
}

// nodeRegistered reports whether a node plugin with nodeID has served on
// dataDir. An error means the state file is there but cannot be read.
func nodeRegistered(dataDir, nodeID string) (bool, error) {
	path := nodeStatePath(dataDir, nodeID)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	var st struct {
		NodeID string `json:"node_id"`
	}
	if err := readJSON(path, &st); err != nil {
		return false, err
	}
	// The file name is a digest of the ID: compare the ID itself.
	return st.NodeID == nodeID, nil
}

// requireNode answers NotFound unless nodeID has registered on the
// controller's data dir.
func (c *controller) requireNode(nodeID string) error {
	ok, err := nodeRegistered(c.cfg.DataDir, nodeID)
	if err != nil {
		return internal("node %q: %v", nodeID, err)
	}
	if !ok {
		return status.Error(codes.NotFound, fmt.Sprintf(
			"node %q does not exist: no node plugin with this node ID has served on data dir %s; use the node ID the node plugin's NodeGetInfo reports, or start that node plugin on this data dir first",
			nodeID, c.cfg.DataDir))
	}
	return nil
}
