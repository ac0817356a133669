//go:build !linux

package mounter

// Without openat2 there is no fast path: the tree walks every path (see
// tree_linux.go).

func noLinks(string) bool { return false }

func removeNoLinks(string, string) (bool, error) { return false, nil }
