package csitest

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/csikit/csikit/csi"
)

// errorf builds the status error a handler returns. Messages name the
// object and never include a request's secrets.
func errorf(code codes.Code, method, format string, args ...any) error {
	return status.Errorf(code, "csitest: %s: %s", method, fmt.Sprintf(format, args...))
}

func required(method, field string) error {
	return errorf(codes.InvalidArgument, method, "%s is required", field)
}

// requireFields answers InvalidArgument "<field> is required" for the
// first empty value; fields alternates field names and values.
func requireFields(method string, fields ...string) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i+1] == "" {
			return required(method, fields[i])
		}
	}
	return nil
}

// requireFieldsAndCapability opens the calls that carry one required
// volume_capability: requireFields on fields, then checkCapability.
func requireFieldsAndCapability(method string, vc *csipb.VolumeCapability, fields ...string) error {
	if err := requireFields(method, fields...); err != nil {
		return err
	}
	return checkCapability(method, "volume_capability", vc)
}

// checkCapabilities validates a repeated volume_capabilities field;
// atLeastOne makes an empty one an error.
func checkCapabilities(method string, vcs []*csipb.VolumeCapability, atLeastOne bool) error {
	if atLeastOne && len(vcs) == 0 {
		return required(method, "volume_capabilities")
	}
	for i, vc := range vcs {
		if err := checkCapability(method, fmt.Sprintf("volume_capabilities[%d]", i), vc); err != nil {
			return err
		}
	}
	return nil
}

// checkExpand validates what both expansion RPCs carry: an optional
// volume_capability and the capacity range.
func checkExpand(method string, vc *csipb.VolumeCapability, r *csipb.CapacityRange) error {
	if vc != nil {
		if err := checkCapability(method, "volume_capability", vc); err != nil {
			return err
		}
	}
	return checkRange(method, r)
}

// checkRange refuses a capacity range no volume can satisfy.
func checkRange(method string, r *csipb.CapacityRange) error {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	if req < 0 || lim < 0 || lim > 0 && req > lim {
		return errorf(codes.OutOfRange, method, "capacity range [%d, %d] is not satisfiable", req, lim)
	}
	return nil
}

// checkCapability validates one volume capability the way the spec asks.
func checkCapability(method, field string, vc *csipb.VolumeCapability) error {
	if vc == nil {
		return required(method, field)
	}
	if vc.GetBlock() == nil && vc.GetMount() == nil {
		return errorf(codes.InvalidArgument, method, "%s has no access type; set block or mount", field)
	}
	if m := csi.AccessMode(vc.GetAccessMode().GetMode()); !m.Valid() {
		return errorf(codes.InvalidArgument, method, "%s has access mode %s; use a defined CSI access mode", field, m)
	}
	return nil
}

func cloneCapability(vc *csipb.VolumeCapability) *csipb.VolumeCapability {
	if vc == nil {
		return nil
	}
	return proto.Clone(vc).(*csipb.VolumeCapability)
}

func singleNode(vc *csipb.VolumeCapability) bool {
	return csi.AccessMode(vc.GetAccessMode().GetMode()).SingleNode()
}

// sameKind reports whether two capabilities share access mode and access
// type (block or mount).
func sameKind(a, b *csipb.VolumeCapability) bool {
	return a.GetAccessMode().GetMode() == b.GetAccessMode().GetMode() &&
		(a.GetBlock() != nil) == (b.GetBlock() != nil)
}

// page applies the spec's max_entries / starting_token pagination to ids,
// which are sorted. The token is the index of the next entry.
func page(method string, ids []string, maxEntries int32, token string) (out []string, next string, err error) {
	if maxEntries < 0 {
		return nil, "", errorf(codes.InvalidArgument, method, "max_entries is %d; it must not be negative", maxEntries)
	}
	start := 0
	if token != "" {
		n, err := strconv.Atoi(token)
		if err != nil || n < 0 || n > len(ids) {
			return nil, "", errorf(codes.Aborted, method, "starting_token %q is not one this plugin issued; list again from the start", token)
		}
		start = n
	}
	end := len(ids)
	if maxEntries > 0 && start+int(maxEntries) < end {
		end = start + int(maxEntries)
		next = strconv.Itoa(end)
	}
	return slices.Clone(ids[start:end]), next, nil
}

func timestamp(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }
