package hostpath

import (
	"maps"
	"slices"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// The CSI spec's limits on a topology segment: a key is an optional
// DNS-subdomain prefix and a "/" before a name, a value is one name.
const (
	maxTopologyPrefix = 253
	maxTopologyName   = 63
)

// ParseTopology reads topology segments written "zone=a,rack=r1" (the
// hostpathplugin -topology flag). The empty string is no topology.
// Every key and value must be non-empty and within the spec's lengths,
// and no key may repeat.
func ParseTopology(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	out := make(map[string]string)
	for seg := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(seg, "=")
		if !ok {
			return nil, configError("topology segment %q is not key=value; write the topology as zone=a,rack=r1", seg)
		}
		if _, dup := out[k]; dup {
			return nil, configError("topology key %q appears twice", k)
		}
		out[k] = v
	}
	if err := checkTopology(out); err != nil {
		return nil, err
	}
	return out, nil
}

// checkTopology validates Config.Topology's segments.
func checkTopology(t map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(t)) {
		v := t[k]
		prefix, name := "", k
		if i := strings.LastIndexByte(k, '/'); i >= 0 {
			prefix, name = k[:i], k[i+1:]
		}
		switch {
		case name == "":
			return configError("topology key %q has no name", k)
		case len(name) > maxTopologyName || len(prefix) > maxTopologyPrefix:
			return configError("topology key %q is too long: the spec allows a prefix of %d bytes and a name of %d", k, maxTopologyPrefix, maxTopologyName)
		case strings.ContainsAny(k, ",="):
			return configError("topology key %q contains ',' or '='", k)
		case v == "":
			return configError("topology key %q has an empty value", k)
		case len(v) > maxTopologyName:
			return configError("topology value %q of key %q is %d bytes long, the spec allows %d", v, k, len(v), maxTopologyName)
		case strings.ContainsAny(v, ",="):
			return configError("topology value %q of key %q contains ',' or '='", v, k)
		}
	}
	return nil
}

// formatTopology writes segments as "zone=a,rack=r1", keys sorted.
func formatTopology(t map[string]string) string {
	s := make([]string, 0, len(t))
	for _, k := range slices.Sorted(maps.Keys(t)) {
		s = append(s, k+"="+t[k])
	}
	return "{" + strings.Join(s, ",") + "}"
}

// reachableFrom reports whether a volume accessible from vol (nil: from
// everywhere) can be used from the topology t: every segment of vol is
// on t. This is the spec's rule for a node's accessible topology, and
// csikit's (csi.Reachable).
func reachableFrom(vol map[string]string, t *csipb.Topology) bool {
	for k, v := range vol {
		if w, ok := t.GetSegments()[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// meetsRequisite reports whether a volume accessible from vol satisfies
// the requisite topologies of r: it is reachable from one of them. With
// no requisite topologies anything does. The plugin places every volume
// in its one topology, so preferred topologies change nothing.
func meetsRequisite(vol map[string]string, r *csipb.TopologyRequirement) bool {
	if len(r.GetRequisite()) == 0 {
		return true
	}
	return slices.ContainsFunc(r.GetRequisite(), func(t *csipb.Topology) bool { return reachableFrom(vol, t) })
}

func requisiteString(r *csipb.TopologyRequirement) string {
	s := make([]string, len(r.GetRequisite()))
	for i, t := range r.GetRequisite() {
		s[i] = formatTopology(t.GetSegments())
	}
	return strings.Join(s, " or ")
}

func topologyToProto(t map[string]string) []*csipb.Topology {
	if len(t) == 0 {
		return nil
	}
	return []*csipb.Topology{{Segments: maps.Clone(t)}}
}

func (c Config) topologyString() string {
	if len(c.Topology) == 0 {
		return "none"
	}
	return formatTopology(c.Topology)
}
