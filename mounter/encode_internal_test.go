package mounter

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/csikit/csikit/csi"
)

// TestEncodeRecord_MatchesMarshal: the hand-written encoder writes what
// encoding/json's Marshal writes, byte for byte, for the edge cases of
// the record's shape and for random records whose strings hold every
// kind of character Marshal escapes.
func TestEncodeRecord_MatchesMarshal(t *testing.T) {
	snw := StageUsage{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	mnmw := StageUsage{AccessMode: csi.AccessModeMultiNodeMultiWriter, AttachmentMode: csi.AttachmentModeBlockDevice}
	cases := map[string]*volumeRecord{
		"no stages":    {Version: 3, Namespace: "default", VolumeID: "vol1"},
		"empty stages": {Version: 3, Stages: map[StageUsage]*stageRecord{}},
		"null stage":   {Version: 3, Stages: map[StageUsage]*stageRecord{snw: nil}},
		"empty stage":  {Version: 3, Stages: map[StageUsage]*stageRecord{snw: {Writers: map[string]*allocRecord{}}}},
		"null publication": {Version: 3, Stages: map[StageUsage]*stageRecord{
			snw: {Stage: stageStaged, Readers: map[string]*allocRecord{"a1": nil}},
		}},
		"two stages, sorted": {Version: 3, Namespace: "ns", VolumeID: "v", ExternalID: "ext", PluginID: "p", Stages: map[StageUsage]*stageRecord{
			snw:  {Stage: stageStaging, StagingPath: "/mnt/staging/ns/v/snw-fs", Writers: map[string]*allocRecord{"b": {State: publishPublished, TargetPath: "/t/b"}, "a": {State: publishPublishing, TargetPath: "/t/a"}}},
			mnmw: {Readers: map[string]*allocRecord{"r": {State: publishUnpublishing, TargetPath: "/t/r"}}},
		}},
	}
	for name, rec := range cases {
		t.Run(name, func(t *testing.T) { requireSameAsMarshal(t, rec) })
	}

	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "Z", "0", "-", "/", `"`, `\`, "<", ">", "&", "\x00", "\x1f", "\n", "\t", "\b", "\f", "\r", "\x7f",
		"é", "漢", "\u2028", "\u2029", "\U0001F600", "\xff", "\xc3", "\xe2\x80"}
	str := func() string {
		var b []byte
		for range rng.IntN(12) {
			b = append(b, alphabet[rng.IntN(len(alphabet))]...)
		}
		return string(b)
	}
	usages := []StageUsage{snw, mnmw, {AccessMode: csi.AccessModeSingleNodeReaderOnly, AttachmentMode: csi.AttachmentModeFileSystem}}
	states := []publishState{publishPublishing, publishPublished, publishUnpublishing}
	pubs := func() map[string]*allocRecord {
		if rng.IntN(3) == 0 {
			return nil
		}
		m := map[string]*allocRecord{}
		for range rng.IntN(4) {
			m[str()] = &allocRecord{State: states[rng.IntN(len(states))], TargetPath: str()}
		}
		return m
	}
	for range 2000 {
		rec := &volumeRecord{Version: rng.IntN(5), Namespace: str(), VolumeID: str(), ExternalID: str(), PluginID: str()}
		if rng.IntN(5) > 0 {
			rec.Stages = map[StageUsage]*stageRecord{}
			for _, u := range usages[:rng.IntN(len(usages)+1)] {
				rec.Stages[u] = &stageRecord{Stage: stageState(str()), StagingPath: str(), Writers: pubs(), Readers: pubs()}
			}
		}
		requireSameAsMarshal(t, rec)
		if t.Failed() {
			return
		}
	}
}

func requireSameAsMarshal(t *testing.T, rec *volumeRecord) {
	t.Helper()
	want, err := json.Marshal(rec)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	got, err := encodeRecord(rec)
	if err != nil {
		t.Fatalf("encodeRecord: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("encodeRecord:\n%s\nMarshal:\n%s", got, want)
	}
}

// The encoder knows every field of the record types: a field added to
// one of them must be added to encodeRecord too.
func TestEncodeRecord_KnowsEveryField(t *testing.T) {
	for _, c := range []struct {
		v    any
		want int
	}{{volumeRecord{}, 6}, {stageRecord{}, 4}, {allocRecord{}, 2}} {
		if n := reflect.TypeOf(c.v).NumField(); n != c.want {
			t.Errorf("%T has %d fields; encodeRecord writes %d: update it (and this test)", c.v, n, c.want)
		}
	}
}

// An invalid stage key fails the encoding, as it fails Marshal.
func TestEncodeRecord_InvalidKey(t *testing.T) {
	rec := &volumeRecord{Version: 3, Stages: map[StageUsage]*stageRecord{{}: {}}}
	if _, err := json.Marshal(rec); err == nil {
		t.Fatal("Marshal took an invalid stage usage")
	}
	if _, err := encodeRecord(rec); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Errorf("encodeRecord = %v, want the key's ErrInvalidRequest", err)
	}
}

func BenchmarkEncodeRecord(b *testing.B) {
	rec := &volumeRecord{Version: 3, Namespace: "plugintest", VolumeID: "vol-34236e4a732a", ExternalID: "vol-2", PluginID: "plugintest",
		Stages: map[StageUsage]*stageRecord{
			{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}: {
				Stage: stageStaged, StagingPath: "/tmp/x/mnt/staging/plugintest/vol-34236e4a732a/snw-fs",
				Writers: map[string]*allocRecord{"alloc-1": {State: publishPublished, TargetPath: "/tmp/x/mnt/per-alloc/alloc-1/vol-34236e4a732a/w-snw-fs"}},
				Readers: map[string]*allocRecord{"alloc-2": {State: publishPublishing, TargetPath: "/tmp/x/mnt/per-alloc/alloc-2/vol-34236e4a732a/r-snw-fs"}},
			},
		}}
	var marshalNs, encodeNs float64
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(rec)
		}
		marshalNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = encodeRecord(rec)
		}
		encodeNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		if marshalNs > 0 {
			b.ReportMetric(encodeNs/marshalNs, "encode-vs-marshal")
		}
	})
}
