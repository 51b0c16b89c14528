package key_test

import (
	"testing"

	"github.com/flightcache/flightcache/key"
)

// fuzzTuple decodes one tuple's worth of fuzz arguments. The low 7 bits of
// mask say which built-ins are set (so "set to empty" is reachable, not just
// "absent"); bits 7 and 8 say whether each of the two extras is added.
func fuzzTuple(mask uint16, v [7]string, n1, x1, n2, x2 string) tuple {
	tp := tuple{set: uint8(mask & 0x7f), vals: v}
	if mask&(1<<7) != 0 {
		tp.extras = append(tp.extras, key.Extra{Name: n1, Value: x1})
	}
	if mask&(1<<8) != 0 {
		tp.extras = append(tp.extras, key.Extra{Name: n2, Value: x2})
	}
	return tp
}

// FuzzKeyInjective: Build never panics, equal keys imply equal tuples, and
// Parse inverts Build.
func FuzzKeyInjective(f *testing.F) {
	type seed struct {
		m1            uint16
		a             [7]string
		an1, ax1, an2 string
		ax2           string
		m2            uint16
		b             [7]string
		bn1, bx1, bn2 string
		bx2           string
	}
	seeds := []seed{
		{m1: 0x0d, a: [7]string{"p", "", "a|id=b", "c"}, m2: 0x0d, b: [7]string{"p", "", "a", "b|id=c"}},
		{m1: 0x09, a: [7]string{"p", "", "", "|"}, m2: 0x09, b: [7]string{"p", "", "", "%7C"}},
		{m1: 0x05, a: [7]string{"p", "", "a=b"}, m2: 0x05, b: [7]string{"p", "", "a%3Db"}},
		{m1: 0x81, a: [7]string{"p"}, an1: "t", ax1: "acme", m2: 0x05, b: [7]string{"p", "", "acme"}},
		{m1: 0x181, a: [7]string{"p"}, an1: "a", ax1: "1", an2: "b", ax2: "2",
			m2: 0x181, b: [7]string{"p"}, bn1: "b", bx1: "2", bn2: "a", bx2: "1"},
		{m1: 0x181, a: [7]string{"p"}, an1: "a", ax1: "1|x.b=2", m2: 0x181, b: [7]string{"p"}, bn1: "a", bx1: "1", bn2: "b", bx2: "2"},
		{m1: 0x03, a: [7]string{"p", ""}, m2: 0x01, b: [7]string{"p"}},
		{m1: 0x7f, a: [7]string{"é", "日本", "\xff", "a\x00", "%", "|", "="}, m2: 0x7f, b: [7]string{"e\u0301", "1", "2", "3", "4", "5", "6"}},
		{m1: 0x101, a: [7]string{"p"}, an2: "tenant", ax2: "acme", m2: 0x81, b: [7]string{"p"}, bn1: "Color", bx1: "x"},
	}
	for _, s := range seeds {
		f.Add(s.m1, s.a[0], s.a[1], s.a[2], s.a[3], s.a[4], s.a[5], s.a[6], s.an1, s.ax1, s.an2, s.ax2,
			s.m2, s.b[0], s.b[1], s.b[2], s.b[3], s.b[4], s.b[5], s.b[6], s.bn1, s.bx1, s.bn2, s.bx2)
	}
	f.Fuzz(func(t *testing.T,
		m1 uint16, a0, a1, a2, a3, a4, a5, a6, an1, ax1, an2, ax2 string,
		m2 uint16, b0, b1, b2, b3, b4, b5, b6, bn1, bx1, bn2, bx2 string,
	) {
		ta := fuzzTuple(m1, [7]string{a0, a1, a2, a3, a4, a5, a6}, an1, ax1, an2, ax2)
		tb := fuzzTuple(m2, [7]string{b0, b1, b2, b3, b4, b5, b6}, bn1, bx1, bn2, bx2)
		ka := checkRoundTrip(t, ta)
		kb := checkRoundTrip(t, tb)
		if ka == "" || kb == "" {
			return
		}
		ca, cb := ta.canonical(), tb.canonical()
		if (ka == kb) != ca.equal(cb) {
			t.Fatalf("keys %q, %q for tuples\n%+v\n%+v", ka, kb, ca, cb)
		}
	})
}

// FuzzParse: Parse never panics, and whatever it accepts is canonical:
// rebuilding the parts reproduces the input exactly.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"ns=p",
		"ns=product|v=3|t=acme|id=42|loc=de-DE|cur=EUR|scope=admin|x.channel=web",
		"ns=p|t=a%7Cb%3Dc%25",
		"ns=p|id=%7c",
		"ns=p|id=%",
		"ns=p|x.b=1|x.a=2",
		"ns=p||",
		"id=1|ns=p",
		"ns=é|id=日本",
		"ns=p|x.tenant=a",
		"",
		"=",
		"|",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := key.Parse(s)
		if err != nil {
			return
		}
		b := key.New(p.Namespace)
		for _, set := range []struct {
			v string
			f func(key.Builder, string) key.Builder
		}{
			{p.Version, key.Builder.Version},
			{p.Tenant, key.Builder.Tenant},
			{p.ID, key.Builder.ID},
			{p.Locale, key.Builder.Locale},
			{p.Currency, key.Builder.Currency},
			{p.Scope, key.Builder.Scope},
		} {
			if set.v != "" {
				b = set.f(b, set.v)
			}
		}
		for _, e := range p.Extras {
			b = b.Dim(e.Name, e.Value)
		}
		k, err := b.MaxLen(len(s) + 1).Build()
		if err != nil || k != s {
			t.Fatalf("Parse accepted %q but rebuilding gives %q, %v", s, k, err)
		}
	})
}
