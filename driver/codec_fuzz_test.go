package driver_test

import (
	"reflect"
	"testing"

	"github.com/flightcache/flightcache/driver"
)

// fuzzValue is a value of the shapes a cached product has: strings,
// integers, a list, a map, a pointer.
type fuzzValue struct {
	Name   string
	Price  int64
	Tags   []string
	Attrs  map[string]string
	Parent *fuzzValue
}

// Whatever bytes the shared tier hands back (another version's entry, a
// corrupt or hostile one), JSONCodec.Unmarshal returns an error or a
// value, never panics; and a value it returned survives a round trip:
// Marshal then Unmarshal gives it back.
func FuzzJSONCodecRoundTrip(f *testing.F) {
	var c driver.JSONCodec[fuzzValue]
	for _, v := range []fuzzValue{
		{},
		{Name: "Kettle", Price: 4200, Tags: []string{"kitchen"}, Attrs: map[string]string{"color": "red"}},
		{Name: "ünïcödé \u2028", Price: -1, Parent: &fuzzValue{Name: "parent"}},
	} {
		b, err := c.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`null`))
	f.Add([]byte(`{"Price":1e400}`))
	f.Add([]byte(`{"Parent":{"Parent":{"Parent":{}}}}`))
	f.Add([]byte("\xff\xfe"))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := c.Unmarshal(data)
		if err != nil {
			return
		}
		b, err := c.Marshal(v)
		if err != nil {
			t.Fatalf("Marshal of a value Unmarshal returned: %v", err)
		}
		again, err := c.Unmarshal(b)
		if err != nil {
			t.Fatalf("Unmarshal of Marshal's own output %q: %v", b, err)
		}
		if !reflect.DeepEqual(v, again) {
			t.Fatalf("round trip changed the value: %+v became %+v (via %q)", v, again, b)
		}
	})
}
