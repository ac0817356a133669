package state

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
)

// fill sets every field reachable from v to a non-zero value: one entry
// in each map, one element in each slice, a filled value behind each
// pointer.
func fill(v reflect.Value, depth int) {
	if depth > 8 {
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", depth))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(depth + 1))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(depth + 1))
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), depth+1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, depth+1)
		fill(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Unix(int64(depth), 0).UTC()))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	}
}

// refs collects the address of every map, slice array and pointer
// reachable from v.
func refs(v reflect.Value, into map[uintptr]string, path string) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return
		}
		into[v.Pointer()] = path
		refs(v.Elem(), into, path)
	case reflect.Slice:
		if v.IsNil() || v.Len() == 0 {
			return
		}
		into[v.Pointer()] = path
		for i := range v.Len() {
			refs(v.Index(i), into, fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Map:
		if v.IsNil() {
			return
		}
		into[v.Pointer()] = path
		for it := v.MapRange(); it.Next(); {
			refs(it.Value(), into, fmt.Sprintf("%s[%v]", path, it.Key()))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				refs(v.Field(i), into, path+"."+v.Type().Field(i).Name)
			}
		}
	}
}

// TestViewVolumes_EveryField reads back a volume with every field set,
// through a row: the result must equal csi.Volume.Copy's and share no
// map, slice or pointer with the stored row. A field added to csi.Volume
// (or to a type inside it) that the row or the read does not copy fails
// here.
func TestViewVolumes_EveryField(t *testing.T) {
	for _, caps := range []int{1, inlineCaps + 1} {
		t.Run(fmt.Sprintf("%d-capabilities", caps), func(t *testing.T) {
			var v csi.Volume
			fill(reflect.ValueOf(&v).Elem(), 0)
			for len(v.Capabilities) < caps {
				v.Capabilities = append(v.Capabilities, v.Capabilities[0])
			}
			// Fields the read fills from the plugin; there is none here.
			v.ControllerRequired, v.Schedulable = false, false
			v.ControllersHealthy, v.ControllersExpected, v.NodesHealthy, v.NodesExpected = 0, 0, 0, 0
			want := v.Copy()
			r := newVolRow(v.Copy())
			got := emptyDB().viewVolumes([]*volRow{r})[0]
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("read = %+v\nwant %+v", got, want)
			}
			stored := map[uintptr]string{}
			refs(reflect.ValueOf(r).Elem().Field(0), stored, "row")
			stored[reflect.ValueOf(&r.caps).Pointer()] = "row.caps"
			read := map[uintptr]string{}
			refs(reflect.ValueOf(got), read, "read")
			for addr, path := range read {
				if s, ok := stored[addr]; ok {
					t.Errorf("%s shares memory with the stored %s", path, s)
				}
			}
		})
	}
}
