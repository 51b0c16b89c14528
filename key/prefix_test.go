package key_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/flightcache/flightcache/key"
)

func TestPrefixFormat(t *testing.T) {
	tests := []struct {
		name string
		b    key.Builder
		want string
	}{
		{"namespace only", key.New("product"), "ns=product|"},
		{"version", key.New("product").Version("3"), "ns=product|v=3|"},
		{"tenant and id", key.New("product").Version("3").Tenant("acme").ID("42"), "ns=product|v=3|t=acme|id=42|"},
		{"no version", key.New("product").Tenant("acme"), "ns=product|t=acme|"},
		{"no tenant (single-tenant keys)", key.New("product").Version("3").ID("42"), "ns=product|v=3|id=42|"},
		{"leading dimensions unset", key.New("product").Scope("admin"), "ns=product|scope=admin|"},
		{
			"every built-in",
			key.New("p").Version("1").Tenant("a").ID("2").Locale("de").Currency("EUR").Scope("s"),
			"ns=p|v=1|t=a|id=2|loc=de|cur=EUR|scope=s|",
		},
		{"extras only", key.New("search").Dim("sort", "price").Dim("filter", "a"), "ns=search|x.filter=a|x.sort=price|"},
		{
			"built-ins up to scope and an extra",
			key.New("p").Tenant("a").ID("2").Locale("de").Currency("EUR").Scope("s").Dim("channel", "web"),
			"ns=p|t=a|id=2|loc=de|cur=EUR|scope=s|x.channel=web|",
		},
		{"separators escaped", key.New("p").Tenant("a|t=b").ID("100%"), "ns=p|t=a%7Ct%3Db|id=100%25|"},
		{
			// Requirements of later dimensions are what may follow.
			"requirements after the prefix",
			key.New("p").Require(key.DimTenant, key.DimID, key.DimLocale, "channel").Tenant("a"),
			"ns=p|t=a|",
		},
		{
			"required extra sorting after the last extra",
			key.New("p").Require("size").Dim("color", "red"),
			"ns=p|x.color=red|",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.b.Prefix()
			if err != nil {
				t.Fatalf("Prefix() error = %v", err)
			}
			if got != tt.want {
				t.Errorf("Prefix() = %q, want %q", got, tt.want)
			}
			// Without requirements left, the prefix is Build's key plus
			// the separator.
			if k, err := tt.b.Build(); err == nil && got != k+"|" {
				t.Errorf("Prefix() = %q, Build() = %q", got, k)
			}
		})
	}
}

func TestPrefixErrors(t *testing.T) {
	tests := []struct {
		name   string
		b      key.Builder
		dim    string
		reason key.Reason
	}{
		{"zero builder", key.Builder{}.Tenant("a"), key.DimNamespace, key.ReasonMissing},
		{"empty namespace", key.New(""), key.DimNamespace, key.ReasonEmpty},
		{"empty id", key.New("p").Tenant("a").ID(""), key.DimID, key.ReasonEmpty},
		{"control char", key.New("p").Tenant("a\n"), key.DimTenant, key.ReasonControlChar},
		{"invalid extra name", key.New("p").Dim("Color", "red"), "Color", key.ReasonInvalidName},
		{"duplicate extra", key.New("p").Dim("c", "1").Dim("c", "2"), "c", key.ReasonDuplicate},
		{"too long", key.New("product").ID("42").MaxLen(10), "", key.ReasonKeyTooLong},
		{"tenant and locale without id", key.New("p").Tenant("acme").Locale("de"), key.DimID, key.ReasonPrefixGap},
		{"tenant and scope without the middle", key.New("p").Tenant("acme").Scope("s"), key.DimID, key.ReasonPrefixGap},
		{"id and currency without locale", key.New("p").ID("1").Currency("EUR"), key.DimLocale, key.ReasonPrefixGap},
		{"extra after an unset built-in", key.New("p").Tenant("a").Dim("channel", "web"), key.DimID, key.ReasonPrefixGap},
		{
			"required tenant missing before id",
			key.New("p").Require(key.DimTenant).ID("42"),
			key.DimTenant, key.ReasonPrefixGap,
		},
		{
			"required version missing",
			key.New("p").Require(key.DimVersion).Tenant("a"),
			key.DimVersion, key.ReasonPrefixGap,
		},
		{
			"required built-in missing before an extra",
			key.New("p").Require(key.DimTenant).Dim("channel", "web"),
			key.DimTenant, key.ReasonPrefixGap,
		},
		{
			"required extra sorting before the last extra",
			key.New("p").Require("color").Dim("size", "L"),
			"color", key.ReasonPrefixGap,
		},
		{
			// The first fault in canonical order wins.
			"first fault reported",
			key.New("p").Tenant("a").Locale("\x00"),
			key.DimID, key.ReasonPrefixGap,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := tt.b.Prefix()
			if err == nil {
				t.Fatalf("Prefix() = %q, want error", p)
			}
			if p != "" {
				t.Errorf("Prefix() returned %q alongside error", p)
			}
			if !errors.Is(err, key.ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
			}
			var ke *key.Error
			if !errors.As(err, &ke) {
				t.Fatalf("error %T is not *key.Error", err)
			}
			if ke.Dim != tt.dim || ke.Reason != tt.reason {
				t.Errorf("got Dim=%q Reason=%q, want Dim=%q Reason=%q", ke.Dim, ke.Reason, tt.dim, tt.reason)
			}
		})
	}
}

// The case the separator exists for: a value that is a prefix of another
// value of the same dimension.
func TestPrefixEndsTheLastValue(t *testing.T) {
	tmpl := key.New("product").Version("3").Require(key.DimTenant, key.DimID, key.DimLocale)
	p, err := tmpl.Tenant("acme").ID("42").Prefix()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []key.Builder{
		tmpl.Tenant("acme").ID("42").Locale("de-DE"),
		tmpl.Tenant("acme").ID("42").Locale("en").Currency("USD").Dim("channel", "web"),
	} {
		if s := k.MustBuild(); !strings.HasPrefix(s, p) {
			t.Errorf("%q does not start with %q", s, p)
		}
	}
	for _, k := range []key.Builder{
		tmpl.Tenant("acme").ID("420").Locale("de-DE"),
		tmpl.Tenant("acme2").ID("42").Locale("de-DE"),
		tmpl.Tenant("acme").ID("4").Locale("de-DE"),
		tmpl.Tenant("acme").ID("42|loc=x").Locale("de-DE"),
		tmpl.Version("30").Tenant("acme").ID("42").Locale("de-DE"),
	} {
		if s := k.MustBuild(); strings.HasPrefix(s, p) {
			t.Errorf("%q starts with %q", s, p)
		}
	}
}

// prefixCase is a tuple (built-ins and unique extras) with requirements,
// for the prefix properties.
type prefixCase struct {
	tuple
	req      uint8 // bit i: built-in i required
	reqExtra []string
}

func (pc prefixCase) builder() key.Builder {
	b := pc.tuple.builder()
	for i := 1; i < 7; i++ {
		if pc.req&(1<<i) != 0 {
			b = b.Require(builtinDims[i])
		}
	}
	return b.Require(pc.reqExtra...)
}

var builtinDims = [7]string{key.DimNamespace, key.DimVersion, key.DimTenant, key.DimID, key.DimLocale, key.DimCurrency, key.DimScope}

var builtinSetters = [7]func(key.Builder, string) key.Builder{
	1: key.Builder.Version, 2: key.Builder.Tenant, 3: key.Builder.ID,
	4: key.Builder.Locale, 5: key.Builder.Currency, 6: key.Builder.Scope,
}

// maxExtra returns the greatest extra name set, or "".
func (pc prefixCase) maxExtra() string {
	m := ""
	for _, e := range pc.extras {
		m = max(m, e.Name)
	}
	return m
}

// gap is the model of Prefix's refusal, written from its documentation:
// the dimension it names, or "" when the case is a valid prefix.
func (pc prefixCase) gap() string {
	last := 0
	for i := 1; i < 7; i++ {
		if pc.set&(1<<i) != 0 {
			last = i
		}
	}
	if len(pc.extras) > 0 {
		last = 7
	}
	first := 7
	for i := 2; i < 7; i++ {
		if pc.set&(1<<i) != 0 {
			first = i
			break
		}
	}
	for i := 1; i < 7; i++ {
		if pc.set&(1<<i) != 0 || i >= last {
			continue
		}
		if pc.req&(1<<i) != 0 || i > first {
			return builtinDims[i]
		}
	}
	for _, r := range pc.reqExtra {
		if len(pc.extras) > 0 && r < pc.maxExtra() && !slices.ContainsFunc(pc.extras, func(e key.Extra) bool { return e.Name == r }) {
			return r
		}
	}
	return ""
}

func randPrefixCase(r *rand.Rand) prefixCase {
	pc := prefixCase{tuple: tuple{set: 1, vals: [7]string{randValue(r)}}}
	// Mostly runs of consecutive dimensions (valid prefixes), sometimes
	// any subset (gaps).
	if r.IntN(3) == 0 {
		pc.set = uint8(r.IntN(128)) | 1
	} else {
		from, to := 2+r.IntN(6), 2+r.IntN(6)
		for i := from; i < to; i++ {
			pc.set |= 1 << i
		}
		if r.IntN(2) == 0 {
			pc.set |= 1 << 1
		}
	}
	for i := 1; i < 7; i++ {
		if pc.set&(1<<i) != 0 {
			pc.vals[i] = randValue(r)
		}
	}
	for _, name := range extraNames {
		if r.IntN(8) == 0 {
			pc.extras = append(pc.extras, key.Extra{Name: name, Value: randValue(r)})
		}
	}
	if r.IntN(3) == 0 {
		pc.req = uint8(r.IntN(128)) &^ 1
	}
	if r.IntN(4) == 0 {
		pc.reqExtra = append(pc.reqExtra, extraNames[r.IntN(len(extraNames))])
	}
	r.Shuffle(len(pc.extras), func(i, j int) { pc.extras[i], pc.extras[j] = pc.extras[j], pc.extras[i] })
	return pc
}

// completion returns a Builder for pc's dimensions plus at least one
// random later one (every later requirement included, so Build succeeds).
func (pc prefixCase) completion(r *rand.Rand) key.Builder {
	return pc.completionAfter(r, pc)
}

// completionAfter is completion with dimensions added only where they
// would follow shape's: a mutation of shape is completed like shape, so
// the completion cannot put back a dimension the mutation removed.
func (pc prefixCase) completionAfter(r *rand.Rand, shape prefixCase) key.Builder {
	b := pc.builder()
	added := false
	last := 0
	for i := 1; i < 7; i++ {
		if shape.set&(1<<i) != 0 {
			last = i
		}
	}
	if len(shape.extras) == 0 {
		for i := last + 1; i < 7; i++ {
			if pc.req&(1<<i) != 0 || r.IntN(2) == 0 {
				b = builtinSetters[i](b, randValue(r))
				added = true
			}
		}
	}
	after := max(pc.maxExtra(), shape.maxExtra())
	for _, name := range extraNames {
		if name <= after {
			continue
		}
		if slices.Contains(pc.reqExtra, name) || r.IntN(3) == 0 {
			b = b.Dim(name, randValue(r))
			added = true
		}
	}
	if !added {
		b = b.Dim(after+"z", randValue(r)) // sorts after every name set
	}
	return b
}

// TestPrefixProperties: on random builders, Prefix refuses exactly the
// documented gaps; otherwise its prefix starts every key of a random
// completion, and no key whose set dimensions differ, are missing, or
// have a dimension inserted before the last one set.
func TestPrefixProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	n := 20000
	if testing.Short() {
		n = 2000
	}
	valid, completions, mismatches := 0, 0, 0
	for range n {
		pc := randPrefixCase(r)
		p, err := pc.builder().Prefix()
		if want := pc.gap(); want != "" {
			var ke *key.Error
			if !errors.As(err, &ke) || ke.Reason != key.ReasonPrefixGap || ke.Dim != want {
				t.Fatalf("Prefix(%+v) = %q, %v; want a gap at %s", pc, p, err, want)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Prefix(%+v): %v", pc, err)
		}
		valid++
		if !strings.HasSuffix(p, "|") {
			t.Fatalf("prefix %q does not end with the separator", p)
		}
		for range 5 {
			k, err := pc.completion(r).Build()
			if err != nil {
				t.Fatalf("completion of %+v: %v", pc, err)
			}
			completions++
			if !strings.HasPrefix(k, p) {
				t.Fatalf("key %q of a completion does not start with prefix %q", k, p)
			}
		}
		for _, other := range mutations(r, pc) {
			k, err := other.completionAfter(r, pc).Build()
			if err != nil {
				continue // e.g. a requirement the mutation removed
			}
			mismatches++
			if strings.HasPrefix(k, p) {
				t.Fatalf("key %q of a different tuple %+v starts with prefix %q of %+v", k, other, p, pc)
			}
		}
	}
	if valid < n/3 || completions < valid*5 || mismatches < valid {
		t.Fatalf("only %d valid prefixes, %d completions, %d mismatches of %d cases: the generator is not exercising Prefix", valid, completions, mismatches, n)
	}
}

// mutations returns copies of pc that differ in one dimension it sets (a
// longer or another value, or the dimension removed) or that set a
// dimension before its last one.
func mutations(r *rand.Rand, pc prefixCase) []prefixCase {
	var out []prefixCase
	clone := func() prefixCase {
		c := pc
		c.extras = slices.Clone(pc.extras)
		c.req = 0 // requirements are the template's, not the key's
		c.reqExtra = nil
		return c
	}
	for i := range 7 {
		if pc.set&(1<<i) == 0 {
			continue
		}
		longer := clone()
		longer.vals[i] += []string{"0", "2", "|", "%", "a"}[r.IntN(5)]
		out = append(out, longer)
		if other := clone(); true {
			other.vals[i] = randValue(r)
			if other.vals[i] != pc.vals[i] {
				out = append(out, other)
			}
		}
		if i > 0 {
			gone := clone()
			gone.set &^= 1 << i
			out = append(out, gone)
		}
	}
	for j := range pc.extras {
		longer := clone()
		longer.extras[j].Value += "0"
		out = append(out, longer)
		gone := clone()
		gone.extras = slices.Delete(gone.extras, j, j+1)
		out = append(out, gone)
	}
	// A dimension inserted before the last one set: such keys are outside
	// the prefix by construction (it is why gaps are refused).
	last := 0
	for i := 1; i < 7; i++ {
		if pc.set&(1<<i) != 0 {
			last = i
		}
	}
	for i := 1; i < last; i++ {
		if pc.set&(1<<i) == 0 {
			ins := clone()
			ins.set |= 1 << i
			ins.vals[i] = randValue(r)
			out = append(out, ins)
		}
	}
	if m := pc.maxExtra(); m != "" {
		for _, name := range extraNames {
			if name < m && !slices.ContainsFunc(pc.extras, func(e key.Extra) bool { return e.Name == name }) {
				ins := clone()
				ins.extras = append(ins.extras, key.Extra{Name: name, Value: randValue(r)})
				out = append(out, ins)
				break
			}
		}
	}
	return out
}

// FuzzPrefix: Prefix never panics; a prefix it returns ends with the
// separator, starts the key of the same dimensions plus a later one, and
// does not start the key with one set dimension changed.
func FuzzPrefix(f *testing.F) {
	f.Add(uint16(0x0d), "product", "3", "acme", "42", "", "", "", "", "", "de-DE", "0", uint8(3), "420")
	f.Add(uint16(0x05), "product", "", "acme", "", "", "", "", "", "", "x", "y", uint8(2), "acme2")
	f.Add(uint16(0x15), "p", "", "a", "", "de", "", "", "", "", "x", "y", uint8(2), "b")
	f.Add(uint16(0x81), "p", "", "", "", "", "", "", "color", "red", "web", "L", uint8(7), "redd")
	f.Add(uint16(0x09), "p", "", "", "a|id=b", "", "", "", "", "", "c", "d", uint8(3), "a")
	f.Add(uint16(0x7f), "é", "日本", "%", "|", "=", "%7C", "\xff", "", "", "x", "y", uint8(6), "")
	f.Fuzz(func(t *testing.T, mask uint16, v0, v1, v2, v3, v4, v5, v6, xn, xv, later, laterX string, m uint8, mv string) {
		pc := prefixCase{tuple: fuzzTuple(mask, [7]string{v0, v1, v2, v3, v4, v5, v6}, xn, xv, "", "")}
		b := pc.builder()
		p, err := b.Prefix()
		if err != nil {
			return
		}
		if !strings.HasSuffix(p, "|") {
			t.Fatalf("prefix %q does not end with the separator", p)
		}
		if k, err := b.Build(); err == nil && k+"|" != p {
			t.Fatalf("Prefix %q is not Build %q plus the separator", p, k)
		}
		// A completion: the next built-in, or an extra after the last.
		last := 0
		for i := 1; i < 7; i++ {
			if pc.set&(1<<i) != 0 {
				last = i
			}
		}
		var c key.Builder
		switch {
		case len(pc.extras) == 0 && last < 6:
			c = builtinSetters[last+1](b, later)
		default:
			c = b.Dim(pc.maxExtra()+"z", laterX)
		}
		if k, err := c.Build(); err == nil && !strings.HasPrefix(k, p) {
			t.Fatalf("key %q of a completion does not start with prefix %q", k, p)
		}
		// One set dimension changed to mv.
		i := int(m % 8)
		var d key.Builder
		switch {
		case i < 7 && pc.set&(1<<i) != 0 && pc.vals[i] != mv:
			other := pc
			other.vals[i] = mv
			d = other.builder()
		case i == 7 && len(pc.extras) > 0 && pc.extras[0].Value != mv:
			other := pc
			other.extras = []key.Extra{{Name: pc.extras[0].Name, Value: mv}}
			d = other.builder()
		default:
			return
		}
		if last < 6 && len(pc.extras) == 0 {
			d = builtinSetters[last+1](d, later)
		}
		if k, err := d.Build(); err == nil && strings.HasPrefix(k, p) {
			t.Fatalf("key %q with a changed dimension starts with prefix %q", k, p)
		}
	})
}
