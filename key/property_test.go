package key_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/flightcache/flightcache/key"
)

// tuple is the abstract input of a key: which built-ins are set, to what,
// and the extra dimensions in call order. It is built independently of the
// package so the tests compare against a model, not against the code under
// test.
type tuple struct {
	set    uint8 // bit i: field i (key.Dim* order) set
	vals   [7]string
	extras []key.Extra
}

func (tp tuple) builder() key.Builder {
	var b key.Builder
	if tp.set&1 != 0 {
		b = key.New(tp.vals[0])
	}
	setters := [...]func(key.Builder, string) key.Builder{
		1: key.Builder.Version,
		2: key.Builder.Tenant,
		3: key.Builder.ID,
		4: key.Builder.Locale,
		5: key.Builder.Currency,
		6: key.Builder.Scope,
	}
	for i := 1; i < 7; i++ {
		if tp.set&(1<<i) != 0 {
			b = setters[i](b, tp.vals[i])
		}
	}
	for _, e := range tp.extras {
		b = b.Dim(e.Name, e.Value)
	}
	return b
}

// canonical returns the tuple with unset values cleared and extras sorted,
// i.e. the representative that equal keys must share.
func (tp tuple) canonical() tuple {
	c := tuple{set: tp.set & 0x7f}
	for i := range 7 {
		if c.set&(1<<i) != 0 {
			c.vals[i] = tp.vals[i]
		}
	}
	c.extras = slices.Clone(tp.extras)
	slices.SortFunc(c.extras, func(a, b key.Extra) int { return strings.Compare(a.Name, b.Name) })
	return c
}

func (tp tuple) equal(o tuple) bool {
	return tp.set == o.set && tp.vals == o.vals && slices.Equal(tp.extras, o.extras)
}

// parts is what Parse must return for a successfully built tuple.
func (tp tuple) parts() key.Parts {
	c := tp.canonical()
	p := key.Parts{
		Namespace: c.vals[0], Version: c.vals[1], Tenant: c.vals[2], ID: c.vals[3],
		Locale: c.vals[4], Currency: c.vals[5], Scope: c.vals[6],
	}
	if len(c.extras) > 0 {
		p.Extras = c.extras
	}
	return p
}

// checkRoundTrip asserts Parse(Build(tp)) == tp and returns the key, or ""
// if tp is invalid.
func checkRoundTrip(t *testing.T, tp tuple) string {
	t.Helper()
	k, err := tp.builder().Build()
	if err != nil {
		return ""
	}
	p, err := key.Parse(k)
	if err != nil {
		t.Fatalf("Parse(Build(%+v)) = %v; key %q", tp, err, k)
	}
	if want := tp.parts(); !partsEqual(p, want) {
		t.Fatalf("Parse(Build(t)) = %+v, want %+v; key %q", p, want, k)
	}
	return k
}

// pieces are concatenated into values to hit separators, escapes, things
// that look like tags, and multi-byte runes.
var pieces = []string{
	"a", "b", "1", "|", "=", "%", "%7C", "%25", "%3D", "%7c", "x.", "ns=", "t=", "|t=",
	"|x.a=", "é", "e\u0301", "日本", "\u00a0", " ", ":", "\\", "\ufffd", "🙂",
}

var extraNames = []string{"a", "b", "c", "color", "size", "x", "t", "ns", "a-b", "a_b"}

func randValue(r *rand.Rand) string {
	var sb strings.Builder
	for range 1 + r.IntN(4) {
		sb.WriteString(pieces[r.IntN(len(pieces))])
	}
	return sb.String()
}

func randTuple(r *rand.Rand) tuple {
	tp := tuple{set: uint8(r.IntN(128)) | 1}
	for i := range 7 {
		if tp.set&(1<<i) != 0 {
			tp.vals[i] = randValue(r)
		}
	}
	for range r.IntN(4) {
		tp.extras = append(tp.extras, key.Extra{
			Name:  extraNames[r.IntN(len(extraNames))],
			Value: randValue(r),
		})
	}
	return tp
}

// TestInjectiveRandom builds many random tuples over a hostile alphabet and
// checks that no two distinct tuples share a key and that every key parses
// back to its tuple.
func TestInjectiveRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 50000
	if testing.Short() {
		n = 5000
	}
	seen := make(map[string]tuple, n)
	built := 0
	for range n {
		tp := randTuple(r)
		k := checkRoundTrip(t, tp)
		if k == "" {
			continue
		}
		built++
		c := tp.canonical()
		if prev, ok := seen[k]; ok && !prev.equal(c) {
			t.Fatalf("collision on %q:\n%+v\n%+v", k, prev, c)
		}
		seen[k] = c
	}
	if built < n/2 {
		t.Fatalf("only %d of %d random tuples were valid; generator is not exercising Build", built, n)
	}
}

// TestInjectiveShift moves text across every boundary between two fields
// ("a|t=b" in one field vs "a" and "b" in two), the classic way joined keys
// collide.
func TestInjectiveShift(t *testing.T) {
	glue := []string{"|", "=", "|t=", "|id=", "|x.a=", "%7C", ""}
	seen := map[string]tuple{}
	for i := range 7 {
		for j := range 7 {
			if i == j {
				continue
			}
			for _, g := range glue {
				for _, split := range []bool{false, true} {
					tp := tuple{set: 1 | 1<<i | 1<<j}
					tp.vals[0] = "ns" // overwritten when i or j is the namespace
					if split {
						tp.vals[i], tp.vals[j] = "a", "b"
					} else {
						tp.vals[i], tp.vals[j] = "a"+g+"b", "c"
					}
					k := checkRoundTrip(t, tp)
					if k == "" {
						continue
					}
					c := tp.canonical()
					if prev, ok := seen[k]; ok && !prev.equal(c) {
						t.Fatalf("collision on %q:\n%+v\n%+v", k, prev, c)
					}
					seen[k] = c
				}
			}
		}
	}
}

// TestOrderIndependent: the same dimensions give the same key, or the same
// error, whatever order the builder calls come in.
func TestOrderIndependent(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		tp := randTuple(r)
		if r.IntN(4) == 0 { // make some values invalid to compare errors too
			tp.vals[r.IntN(7)] = []string{"", "\x00", "\xff"}[r.IntN(3)]
		}
		if r.IntN(4) == 0 && len(tp.extras) > 0 {
			tp.extras[r.IntN(len(tp.extras))].Value = ""
		}
		k1, err1 := tp.builder().Build()

		// Replay the same calls in a random order.
		var ops []func(key.Builder) key.Builder
		setters := [...]func(key.Builder, string) key.Builder{
			key.Builder.Version, key.Builder.Tenant, key.Builder.ID,
			key.Builder.Locale, key.Builder.Currency, key.Builder.Scope,
		}
		for i := 1; i < 7; i++ {
			if tp.set&(1<<i) != 0 {
				ops = append(ops, func(b key.Builder) key.Builder { return setters[i-1](b, tp.vals[i]) })
			}
		}
		for _, e := range tp.extras {
			ops = append(ops, func(b key.Builder) key.Builder { return b.Dim(e.Name, e.Value) })
		}
		r.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
		b := key.New(tp.vals[0])
		for _, op := range ops {
			b = op(b)
		}
		k2, err2 := b.Build()
		if k1 != k2 || fmt.Sprint(err1) != fmt.Sprint(err2) {
			t.Fatalf("order changed the result: %q (%v) vs %q (%v)", k1, err1, k2, err2)
		}
	}
}
