package mounter

import (
	"slices"
	"strconv"
	"unicode/utf8"
)

// encodeRecord returns rec as JSON, byte for byte what encoding/json's
// Marshal writes for it (same field order, map keys sorted, omitempty,
// HTML-safe string escapes), so that readers and older agents see no
// difference. It is written out because the store encodes a record at
// every state write, where Marshal's reflection costs more than the
// write in place itself. TestEncodeRecord_MatchesMarshal holds the two
// together.
func encodeRecord(rec *volumeRecord) ([]byte, error) {
	b := make([]byte, 0, 512)
	b = append(b, `{"Version":`...)
	b = strconv.AppendInt(b, int64(rec.Version), 10)
	b = append(b, `,"Namespace":`...)
	b = appendString(b, rec.Namespace)
	b = append(b, `,"VolumeID":`...)
	b = appendString(b, rec.VolumeID)
	b = append(b, `,"ExternalID":`...)
	b = appendString(b, rec.ExternalID)
	b = append(b, `,"PluginID":`...)
	b = appendString(b, rec.PluginID)
	b = append(b, `,"Stages":`...)
	if rec.Stages == nil {
		b = append(b, "null"...)
		return append(b, '}'), nil
	}
	type entry struct {
		key string
		s   *stageRecord
	}
	entries := make([]entry, 0, len(rec.Stages))
	for k, s := range rec.Stages {
		// The key's text form, as Marshal takes it (TextMarshaler).
		text, err := k.MarshalText()
		if err != nil {
			return nil, err
		}
		entries = append(entries, entry{string(text), s})
	}
	slices.SortFunc(entries, func(a, b entry) int {
		switch {
		case a.key < b.key:
			return -1
		case a.key > b.key:
			return 1
		}
		return 0
	})
	b = append(b, '{')
	for i, e := range entries {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, e.key)
		b = append(b, ':')
		b = appendStage(b, e.s)
	}
	b = append(b, "}}"...)
	return b, nil
}

// appendStage appends a stageRecord as Marshal writes it: its fields
// are all omitempty.
func appendStage(b []byte, s *stageRecord) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	b = append(b, '{')
	sep := false
	field := func(name string) {
		if sep {
			b = append(b, ',')
		}
		sep = true
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, `":`...)
	}
	if s.Stage != "" {
		field("Stage")
		b = appendString(b, string(s.Stage))
	}
	if s.StagingPath != "" {
		field("StagingPath")
		b = appendString(b, s.StagingPath)
	}
	if len(s.Writers) > 0 {
		field("Writers")
		b = appendAllocs(b, s.Writers)
	}
	if len(s.Readers) > 0 {
		field("Readers")
		b = appendAllocs(b, s.Readers)
	}
	return append(b, '}')
}

// appendAllocs appends a map of publications, keys sorted.
func appendAllocs(b []byte, m map[string]*allocRecord) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		a := m[k]
		if a == nil {
			b = append(b, "null"...)
			continue
		}
		b = append(b, `{"State":`...)
		b = appendString(b, string(a.State))
		b = append(b, `,"TargetPath":`...)
		b = appendString(b, a.TargetPath)
		b = append(b, '}')
	}
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string with Marshal's escapes:
// quote and backslash; \b \f \n \r \t; other control characters, '<',
// '>' and '&' as \u00XX; invalid UTF-8 as \ufffd; U+2028 and U+2029 as
// \u2028 and \u2029.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
