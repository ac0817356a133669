package cli

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"

	"github.com/csikit/csikit/csi"
)

// accessModes lists the access modes a flag takes.
func accessModes() string {
	var names []string
	for m := csi.AccessMode(1); m.Valid(); m++ {
		names = append(names, m.String())
	}
	return strings.Join(names, ", ")
}

const attachmentModes = "file-system, block-device"

// parseAccessMode parses flag's access mode, listing the valid ones when
// it is none of them.
func parseAccessMode(flag, s string) (csi.AccessMode, error) {
	m, err := csi.ParseAccessMode(s)
	if err != nil {
		return m, fmt.Errorf("%w: %s %q is not an access mode; want one of %s", csi.ErrInvalidRequest, flag, s, accessModes())
	}
	return m, nil
}

// parseAttachmentMode parses flag's attachment mode, listing the valid
// ones when it is none of them.
func parseAttachmentMode(flag, s string) (csi.AttachmentMode, error) {
	m, err := csi.ParseAttachmentMode(s)
	if err != nil {
		return m, fmt.Errorf("%w: %s %q is not an attachment mode; want %s", csi.ErrInvalidRequest, flag, s, attachmentModes)
	}
	return m, nil
}

// parseClaimMode parses -mode.
func parseClaimMode(s string) (csi.ClaimMode, error) {
	var m csi.ClaimMode
	if err := m.UnmarshalText([]byte(s)); err != nil {
		return m, fmt.Errorf("%w: -mode %q is not a claim mode; want read or write", csi.ErrInvalidRequest, s)
	}
	return m, nil
}

// sizeUnits are the units a size flag takes, by their lower-case
// spelling: decimal (K, M, G, T) and binary (Ki, Mi, Gi, Ti), with or
// without a trailing B.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
	"ki": 1 << 10, "kib": 1 << 10, "mi": 1 << 20, "mib": 1 << 20, "gi": 1 << 30, "gib": 1 << 30, "ti": 1 << 40, "tib": 1 << 40,
}

// sizeFlag is a byte count given as a number with an optional unit:
// 1073741824, 1GiB, 1Gi, 500M, 1.5G.
type sizeFlag int64

func (f *sizeFlag) String() string { return strconv.FormatInt(int64(*f), 10) }

func (f *sizeFlag) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*f = sizeFlag(n)
	return nil
}

// parseSize parses a size such as 1GiB, 500M or 1024 into bytes.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return !unicode.IsDigit(r) && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.TrimSpace(t[i:])
	}
	mult, ok := sizeUnits[strings.ToLower(unit)]
	v, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a size: give bytes, or a number with a unit such as 500M, 1G or 1GiB (K, M, G, T are powers of 1000; Ki, Mi, Gi, Ti of 1024)", s)
	}
	b := v * float64(mult)
	if b > math.MaxInt64 {
		return 0, fmt.Errorf("%q is too large a size", s)
	}
	return int64(b), nil
}

// idCheck names an ID a command sends and the rule it must follow.
type idCheck struct {
	what, value string
	validate    func(string) error
}

// validateIDs checks the IDs a command will put in a request's path
// before any is escaped, so an error quotes the ID as typed ("bad id!",
// not "bad%20id%21"). Empty values are skipped: they are checked as
// required flags.
func validateIDs(ids ...idCheck) error {
	for _, id := range ids {
		if id.value == "" {
			continue
		}
		if err := id.validate(id.value); err != nil {
			return fmt.Errorf("%s: %w", id.what, err)
		}
	}
	return nil
}

func idVolume(flag, v string) idCheck { return idCheck{flag, v, csi.ValidateVolumeID} }
func idNamespace(v string) idCheck    { return idCheck{"-namespace", v, csi.ValidateNamespace} }
func idPlugin(flag, v string) idCheck { return idCheck{flag, v, csi.ValidatePluginID} }
func idNode(flag, v string) idCheck   { return idCheck{flag, v, csi.ValidateNodeID} }
func idAlloc(flag, v string) idCheck  { return idCheck{flag, v, csi.ValidateAllocationID} }
