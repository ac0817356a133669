package rpcshim

import (
	"bytes"
	"encoding"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
)

// The wire copies stand in for a JSON round trip, so they are checked
// against one: every message with a wire copy is filled with random
// values (every field, reached by reflection, so a field added later is
// filled too), and
//
//   - a copy that succeeds must equal what JSON would decode
//     (reflect.DeepEqual, so nil and empty differ) and share no memory
//     with the original: changing everything the copy reaches leaves the
//     original's encoding as it was;
//   - values JSON carries unchanged (valid UTF-8, defined modes) must
//     always be copied, so the fast path is the common one;
//   - a reply's wireZero must hold exactly for its zero value.

// wireStringsPool are the strings the filler picks from; the last one
// is not valid UTF-8, which JSON does not carry unchanged.
var wireStringsPool = []string{"", "a", "node-1", "ü/ß", "<&>\"", "\xff\xfe"}

// filler fills values with random contents.
type filler struct {
	rng *rand.Rand
	// valid restricts the values to those JSON carries unchanged.
	valid bool
}

func (f *filler) fill(v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.String:
		// The invalid string is rare, so that many random messages have
		// none and the other refusals (modes) are reached too.
		i := f.rng.IntN(len(wireStringsPool) - 1)
		if !f.valid && f.rng.IntN(16) == 0 {
			i = len(wireStringsPool) - 1
		}
		v.SetString(wireStringsPool[i])
	case reflect.Bool:
		v.SetBool(f.rng.IntN(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		// Small values hit every defined mode (and, unless valid, some
		// undefined ones); a large one now and then for sizes.
		switch {
		case f.valid && v.Type().PkgPath() != "":
			v.SetInt(int64(f.rng.IntN(2))) // the unknown mode or the first defined one, for every enum
		case f.rng.IntN(8) == 0:
			v.SetInt(f.rng.Int64N(1 << 40))
		default:
			v.SetInt(int64(f.rng.IntN(10) - 2))
		}
	case reflect.Map:
		switch f.rng.IntN(3) {
		case 0:
			v.SetZero()
		case 1:
			v.Set(reflect.MakeMap(v.Type()))
		default:
			m := reflect.MakeMap(v.Type())
			for range 1 + f.rng.IntN(3) {
				k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
				f.fill(k, depth+1)
				f.fill(e, depth+1)
				m.SetMapIndex(k, e)
			}
			v.Set(m)
		}
	case reflect.Slice:
		switch f.rng.IntN(3) {
		case 0:
			v.SetZero()
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		default:
			s := reflect.MakeSlice(v.Type(), 1+f.rng.IntN(3), 3)
			for i := range s.Len() {
				f.fill(s.Index(i), depth+1)
			}
			v.Set(s)
		}
	case reflect.Pointer:
		if depth > 6 || f.rng.IntN(3) == 0 {
			v.SetZero()
			return
		}
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Struct:
		if f.valid && v.Addr().Type().Implements(textMarshaler) {
			// A struct that encodes as text (mounter.Usage) is valid
			// whole or not at all: all its modes unknown (zero), or all
			// the first defined one.
			n := int64(f.rng.IntN(2))
			for i := range v.NumField() {
				v.Field(i).SetInt(n)
			}
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				f.fill(v.Field(i), depth+1)
			}
		}
	}
}

var textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()

// mutate changes everything v reaches.
func mutate(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("mutated")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Map:
		if v.IsNil() {
			return
		}
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			mutate(e)
			v.SetMapIndex(k, e)
		}
		k := reflect.New(v.Type().Key()).Elem()
		mutate(k)
		v.SetMapIndex(k, reflect.New(v.Type().Elem()).Elem())
	case reflect.Slice:
		for i := range v.Len() {
			mutate(v.Index(i))
		}
	case reflect.Pointer:
		if !v.IsNil() {
			mutate(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				mutate(v.Field(i))
			}
		}
	}
}

// checkWireCopy runs the checks above for message type T.
func checkWireCopy[T any, P wireMessage[T]](t *testing.T, seed uint64) {
	t.Helper()
	for _, valid := range []bool{false, true} {
		f := &filler{rng: rand.New(rand.NewPCG(seed, 1)), valid: valid}
		copied := 0
		const samples = 3000
		for range samples {
			orig := new(T)
			f.fill(reflect.ValueOf(orig).Elem(), 0)
			enc, encErr := json.Marshal(orig)
			var rt T
			decErr := encErr
			if encErr == nil {
				decErr = json.Unmarshal(enc, &rt)
			}
			c, ok := P(orig).wireCopy()
			if !ok {
				if valid {
					t.Fatalf("valid %T not copied: %+v", orig, orig)
				}
				continue
			}
			copied++
			if decErr != nil {
				t.Fatalf("%T copied although JSON does not carry it (%v): %+v", orig, decErr, orig)
			}
			if !reflect.DeepEqual(*c, rt) {
				t.Fatalf("wire copy of %T differs from its JSON round trip:\ncopy %#v\njson %#v", orig, *c, rt)
			}
			mutate(reflect.ValueOf(c).Elem())
			if again, _ := json.Marshal(orig); !bytes.Equal(again, enc) {
				t.Fatalf("changing the wire copy of %T changed the original:\nbefore %s\nafter  %s", orig, enc, again)
			}
		}
		if copied < samples/50 {
			t.Errorf("only %d of %d random %T copied; the check has too little to look at", copied, samples, new(T))
		}
	}
}

// checkWireZero checks a reply's wireZero on its zero value and on
// random ones.
func checkWireZero[T any, P wireReplyMessage[T]](t *testing.T, seed uint64) {
	t.Helper()
	var zero T
	if !P(&zero).wireZero() {
		t.Errorf("wireZero of the zero %T is false", zero)
	}
	f := &filler{rng: rand.New(rand.NewPCG(seed, 2))}
	for range 3000 {
		v := new(T)
		f.fill(reflect.ValueOf(v).Elem(), 0)
		if got, want := P(v).wireZero(), reflect.DeepEqual(*v, zero); got != want {
			t.Fatalf("wireZero(%#v) = %t, want %t", *v, got, want)
		}
	}
}

// wirePair checks the copies of a request type and its response type
// (whose zero value also travels as "no reply").
func wirePair[Req any, Resp any, PReq wireMessage[Req], PResp wireReplyMessage[Resp]](seed uint64) func(*testing.T) {
	return func(t *testing.T) {
		t.Run("request", func(t *testing.T) { checkWireCopy[Req, PReq](t, seed) })
		t.Run("response", func(t *testing.T) {
			checkWireCopy[Resp, PResp](t, seed)
			checkWireZero[Resp, PResp](t, seed)
		})
	}
}

func TestWireCopy(t *testing.T) {
	const seed = 20260301
	t.Run("ControllerPublish", wirePair[ControllerPublishRequest, ControllerPublishResponse](seed))
	t.Run("ControllerUnpublish", wirePair[ControllerUnpublishRequest, ControllerUnpublishResponse](seed))
	t.Run("ValidateCapabilities", wirePair[ValidateCapabilitiesRequest, ValidateCapabilitiesResponse](seed))
	t.Run("CreateVolume", wirePair[CreateVolumeRequest, CreateVolumeResponse](seed))
	t.Run("DeleteVolume", wirePair[DeleteVolumeRequest, DeleteVolumeResponse](seed))
	t.Run("NodeDetach", wirePair[NodeDetachRequest, NodeDetachResponse](seed))
}
