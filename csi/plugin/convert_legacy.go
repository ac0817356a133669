package plugin

// This file reads what CSI spec versions before 1.13 sent and 1.13
// removed: the module's spec types no longer have the fields, so protobuf
// keeps them as unknown fields of the message they arrived in, and the
// Client decodes them by field number. The spec reserves the numbers, so
// no later field can take them.

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Field numbers of the removed VolumeCondition message (spec 1.3 to
// 1.12, alpha) and of the status field that held it in
// ControllerGetVolumeResponse.VolumeStatus.
const (
	legacyStatusCondition protowire.Number = 2
	legacyAbnormal        protowire.Number = 1
	legacyMessage         protowire.Number = 2
)

// legacyConditionFromPB returns the volume condition a pre-1.13 plugin
// put in field 2 of status, or nil when there is none. Like protobuf, it
// merges repeated occurrences (the last value of each field wins) and
// skips fields it does not know or whose wire type does not match.
func legacyConditionFromPB(status proto.Message) (*VolumeCondition, error) {
	var out *VolumeCondition
	err := eachField(status.ProtoReflect().GetUnknown(), func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		if num != legacyStatusCondition || typ != protowire.BytesType {
			return protowire.ConsumeFieldValue(num, typ, b), nil
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return n, nil
		}
		if out == nil {
			out = &VolumeCondition{}
		}
		return n, out.mergeLegacy(v)
	})
	if err != nil {
		return nil, fmt.Errorf("volume_condition (field 2 of the status, CSI 1.12 and earlier): %w", err)
	}
	return out, nil
}

// mergeLegacy applies the fields of an encoded VolumeCondition to c.
func (c *VolumeCondition) mergeLegacy(b []byte) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch {
		case num == legacyAbnormal && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			c.Abnormal = v != 0
			return n, nil
		case num == legacyMessage && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n >= 0 && !utf8.Valid(v) {
				return n, fmt.Errorf("message is not valid UTF-8")
			}
			c.Message = string(v)
			return n, nil
		}
		return protowire.ConsumeFieldValue(num, typ, b), nil
	})
}

// eachField calls fn with the number, wire type and remaining bytes of
// every field in the encoded message b; fn returns how many bytes the
// field's value took (negative: a protowire parse error).
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, b []byte) (int, error)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		n, err := fn(num, typ, b)
		if err != nil {
			return err
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
	}
	return nil
}
