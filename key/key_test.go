package key_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/flightcache/flightcache/key"
)

func TestBuildFormat(t *testing.T) {
	tests := []struct {
		name string
		b    key.Builder
		want string
	}{
		{"namespace only", key.New("product"), "ns=product"},
		{
			"all built-ins",
			key.New("product").Version("3").Tenant("acme").ID("42").Locale("de-DE").Currency("EUR").Scope("admin"),
			"ns=product|v=3|t=acme|id=42|loc=de-DE|cur=EUR|scope=admin",
		},
		{
			// Setter order must not leak into the key.
			"built-ins set out of order",
			key.New("product").Scope("admin").Currency("EUR").Locale("de-DE").ID("42").Tenant("acme").Version("3"),
			"ns=product|v=3|t=acme|id=42|loc=de-DE|cur=EUR|scope=admin",
		},
		{
			"extras sorted by name",
			key.New("p").Dim("size", "L").Dim("color", "red").Dim("channel", "web"),
			"ns=p|x.channel=web|x.color=red|x.size=L",
		},
		{
			"separators escaped",
			key.New("p").Tenant("a|t=b").ID("100%"),
			"ns=p|t=a%7Ct%3Db|id=100%25",
		},
		{
			"escape-like text escaped again",
			key.New("p").ID("%7C"),
			"ns=p|id=%257C",
		},
		{"unicode kept readable", key.New("p").Locale("日本").ID("café"), "ns=p|id=café|loc=日本"},
		{"later setter wins", key.New("p").Tenant("a").Tenant("b"), "ns=p|t=b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.b.Build()
			if err != nil {
				t.Fatalf("Build() error = %v", err)
			}
			if got != tt.want {
				t.Errorf("Build() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestBuildErrors(t *testing.T) {
	long := strings.Repeat("a", key.MaxValueLen+1)
	many := key.New("p")
	for i := range key.MaxDims + 1 {
		many = many.Dim(fmt.Sprintf("d%02d", i), "v")
	}
	tests := []struct {
		name   string
		b      key.Builder
		dim    string
		reason key.Reason
	}{
		{"zero builder", key.Builder{}.ID("1"), key.DimNamespace, key.ReasonMissing},
		{"empty namespace", key.New(""), key.DimNamespace, key.ReasonEmpty},
		{"empty version", key.New("p").Version(""), key.DimVersion, key.ReasonEmpty},
		{"empty tenant", key.New("p").Tenant(""), key.DimTenant, key.ReasonEmpty},
		{"empty id", key.New("p").ID(""), key.DimID, key.ReasonEmpty},
		{"empty locale", key.New("p").Locale(""), key.DimLocale, key.ReasonEmpty},
		{"empty currency", key.New("p").Currency(""), key.DimCurrency, key.ReasonEmpty},
		{"empty scope", key.New("p").Scope(""), key.DimScope, key.ReasonEmpty},
		{"empty extra", key.New("p").Dim("color", ""), "color", key.ReasonEmpty},
		{"value too long", key.New("p").ID(long), key.DimID, key.ReasonTooLong},
		{"extra too long", key.New("p").Dim("q", long), "q", key.ReasonTooLong},
		{"invalid utf-8", key.New("p").Tenant("ac\xffme"), key.DimTenant, key.ReasonInvalidUTF8},
		{"truncated utf-8", key.New("p").Locale("\xe6\x97"), key.DimLocale, key.ReasonInvalidUTF8},
		{"utf-8 surrogate", key.New("p").ID("\xed\xa0\x80"), key.DimID, key.ReasonInvalidUTF8},
		{"NUL", key.New("p").ID("4\x002"), key.DimID, key.ReasonControlChar},
		{"newline", key.New("p").Currency("EUR\n"), key.DimCurrency, key.ReasonControlChar},
		{"DEL", key.New("p").Scope("a\x7f"), key.DimScope, key.ReasonControlChar},
		{"C1 control", key.New("p").Version("\u0085"), key.DimVersion, key.ReasonControlChar},
		{"control in namespace", key.New("p\r"), key.DimNamespace, key.ReasonControlChar},
		{"missing required tenant", key.New("p").Require(key.DimTenant), key.DimTenant, key.ReasonMissing},
		{"missing required extra", key.New("p").Require("channel").Dim("color", "red"), "channel", key.ReasonMissing},
		{"duplicate extra", key.New("p").Dim("color", "red").Dim("color", "blue"), "color", key.ReasonDuplicate},
		{"duplicate extra same value", key.New("p").Dim("color", "red").Dim("color", "red"), "color", key.ReasonDuplicate},
		{"duplicate extra, first empty", key.New("p").Dim("color", "").Dim("color", "red"), "color", key.ReasonDuplicate},
		{"duplicate extra, second empty", key.New("p").Dim("color", "red").Dim("color", ""), "color", key.ReasonDuplicate},
		{"too many extras", many, "", key.ReasonTooManyDims},
		{"empty name", key.New("p").Dim("", "v"), "", key.ReasonInvalidName},
		{"upper-case name", key.New("p").Dim("Color", "v"), "Color", key.ReasonInvalidName},
		{"name with separator", key.New("p").Dim("a|b", "v"), "a|b", key.ReasonInvalidName},
		{"name with equals", key.New("p").Dim("a=b", "v"), "a=b", key.ReasonInvalidName},
		{"name starting with digit", key.New("p").Dim("1a", "v"), "1a", key.ReasonInvalidName},
		{"name too long", key.New("p").Dim(strings.Repeat("n", key.MaxNameLen+1), "v"), strings.Repeat("n", key.MaxNameLen+1), key.ReasonInvalidName},
		{"reserved name", key.New("p").Dim(key.DimTenant, "acme"), key.DimTenant, key.ReasonInvalidName},
		{"invalid required name", key.New("p").Require("Tenant"), "Tenant", key.ReasonInvalidName},
		{
			"key too long",
			key.New("p").Version(long[:256]).Tenant(long[:256]).ID(long[:256]).Locale(long[:256]),
			"", key.ReasonKeyTooLong,
		},
		{"custom max len", key.New("product").ID("42").MaxLen(10), "", key.ReasonKeyTooLong},
		{
			// Escaping counts towards the limit: 3 raw bytes, 9 encoded.
			"max len counts escapes",
			key.New("p").ID("|||").MaxLen(len("ns=p|id=") + 8),
			"", key.ReasonKeyTooLong,
		},
		{
			// The first fault in canonical order wins, whatever the call order.
			"first fault reported",
			key.New("p").Scope("").Tenant("\x00"),
			key.DimTenant, key.ReasonControlChar,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := tt.b.Build()
			if err == nil {
				t.Fatalf("Build() = %q, want error", k)
			}
			if k != "" {
				t.Errorf("Build() returned key %q alongside error", k)
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
			if func() (p any) { defer func() { p = recover() }(); tt.b.MustBuild(); return nil }() == nil {
				t.Error("MustBuild did not panic")
			}
		})
	}
}

func TestLimitsAreInclusive(t *testing.T) {
	full := strings.Repeat("a", key.MaxValueLen)
	if _, err := key.New("p").ID(full).Build(); err != nil {
		t.Errorf("value of exactly MaxValueLen: %v", err)
	}
	b := key.New("p")
	for i := range key.MaxDims {
		b = b.Dim(fmt.Sprintf("d%02d", i), "v")
	}
	if _, err := b.Build(); err != nil {
		t.Errorf("exactly MaxDims extras: %v", err)
	}
	if _, err := key.New("p").Dim(strings.Repeat("n", key.MaxNameLen), "v").Build(); err != nil {
		t.Errorf("name of exactly MaxNameLen: %v", err)
	}
	k := key.New("p").ID("|||").MaxLen(len("ns=p|id=") + 9).MustBuild()
	if k != "ns=p|id=%7C%7C%7C" {
		t.Errorf("got %q", k)
	}
	if _, err := key.New("p").ID(strings.Repeat("x", 300)[:256]).MaxLen(0).Build(); err != nil {
		t.Errorf("MaxLen(0) should restore the default: %v", err)
	}
	// A key longer than the default limit is fine once the limit is raised.
	long := key.New("p").Version(full).Tenant(full).ID(full).Locale(full).MaxLen(2000)
	if _, err := long.Build(); err != nil {
		t.Errorf("raised MaxLen: %v", err)
	}
}

func TestErrorMessage(t *testing.T) {
	tests := []struct {
		b    key.Builder
		want string
	}{
		{key.New("p").Require(key.DimTenant), "key: tenant: missing required dimension"},
		{key.New("p").ID(strings.Repeat("a", 300)), "key: id: value too long (300 bytes, max 256)"},
		// The offending value never appears; an invalid name is quoted so it
		// cannot inject into logs.
		{key.New("p").Tenant("secret\n"), "key: tenant: control character"},
		{key.New("p").Dim("a\nb", "v"), `key: "a\nb": invalid dimension name`},
		{key.New("product").ID("42").MaxLen(10), "key: key too long (16 bytes, max 10)"},
	}
	for _, tt := range tests {
		_, err := tt.b.Build()
		if err == nil || err.Error() != tt.want {
			t.Errorf("error = %v, want %q", err, tt.want)
		}
	}
}

// TestTenantIsolation is the security property the package exists for.
func TestTenantIsolation(t *testing.T) {
	productKey := key.New("product").Version("3").Require(key.DimTenant, key.DimID)

	a := productKey.Tenant("acme").ID("42").MustBuild()
	b := productKey.Tenant("globex").ID("42").MustBuild()
	if a == b {
		t.Fatalf("two tenants share key %q", a)
	}

	// A key for tenant-scoped data built without the tenant must fail rather
	// than produce a key shared by all tenants.
	k, err := productKey.ID("42").Build()
	var ke *key.Error
	if !errors.As(err, &ke) || ke.Dim != key.DimTenant || ke.Reason != key.ReasonMissing {
		t.Fatalf("Build without tenant = %q, %v; want missing tenant", k, err)
	}

	// An empty tenant (e.g. an unset field in a request context) must not be
	// mistaken for "no tenant".
	if _, err := productKey.Tenant("").ID("42").Build(); !errors.As(err, &ke) || ke.Reason != key.ReasonEmpty {
		t.Fatalf("empty tenant: err = %v, want ReasonEmpty", err)
	}

	// A tenant that tries to smuggle separators cannot reach another
	// tenant's key.
	forged := productKey.Tenant("acme|id=42").ID("7").MustBuild()
	if forged == a || strings.Contains(forged, "|id=42") {
		t.Fatalf("forged tenant produced %q", forged)
	}

	// The tenant cannot be moved into an extra dimension to dodge Require.
	if _, err := key.New("product").Dim("tenant", "acme").Build(); !errors.As(err, &ke) || ke.Reason != key.ReasonInvalidName {
		t.Fatalf("extra named tenant: err = %v, want ReasonInvalidName", err)
	}
}

// TestTemplateIsolation guards the copy-on-write rule: derived builders
// must never see each other's dimensions, even when created from the same
// template concurrently.
func TestTemplateIsolation(t *testing.T) {
	base := key.New("p").Dim("b", "1").Dim("d", "2").Require("b")
	x := base.Dim("c", "x")
	y := base.Dim("c", "y")
	z := base.Dim("a", "z").Require("a")
	if got, want := x.MustBuild(), "ns=p|x.b=1|x.c=x|x.d=2"; got != want {
		t.Errorf("x = %q, want %q", got, want)
	}
	if got, want := y.MustBuild(), "ns=p|x.b=1|x.c=y|x.d=2"; got != want {
		t.Errorf("y = %q, want %q", got, want)
	}
	if got, want := z.MustBuild(), "ns=p|x.a=z|x.b=1|x.d=2"; got != want {
		t.Errorf("z = %q, want %q", got, want)
	}
	if got, want := base.MustBuild(), "ns=p|x.b=1|x.d=2"; got != want {
		t.Errorf("base changed: %q, want %q", got, want)
	}
	// z's extra requirement must not leak back into base or its siblings.
	if _, err := base.Dim("c", "ok").Build(); err != nil {
		t.Errorf("requirement leaked from z: %v", err)
	}

	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 200 {
				tenant := fmt.Sprintf("t%d", i)
				got := base.Tenant(tenant).Dim("n", fmt.Sprint(j)).Require("n").MustBuild()
				want := fmt.Sprintf("ns=p|t=%s|x.b=1|x.d=2|x.n=%d", tenant, j)
				if got != want {
					t.Errorf("got %q, want %q", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestParse(t *testing.T) {
	k := key.New("product").Version("3").Tenant("a|c=m%e").ID("42").Locale("de-DE").
		Currency("EUR").Scope("admin").Dim("size", "L").Dim("color", "=").MustBuild()
	got, err := key.Parse(k)
	if err != nil {
		t.Fatalf("Parse(%q): %v", k, err)
	}
	want := key.Parts{
		Namespace: "product", Version: "3", Tenant: "a|c=m%e", ID: "42",
		Locale: "de-DE", Currency: "EUR", Scope: "admin",
		Extras: []key.Extra{{Name: "color", Value: "="}, {Name: "size", Value: "L"}},
	}
	if !partsEqual(got, want) {
		t.Errorf("Parse = %+v, want %+v", got, want)
	}
	p, err := key.Parse("ns=p")
	if err != nil || !partsEqual(p, key.Parts{Namespace: "p"}) || p.Extras != nil {
		t.Errorf("Parse(ns=p) = %+v, %v", p, err)
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		in     string
		dim    string
		reason key.Reason
	}{
		{"", "", key.ReasonMalformed},
		{"product:42", "", key.ReasonMalformed},
		{"ns=", key.DimNamespace, key.ReasonEmpty},
		{"ns=p|", "", key.ReasonMalformed},
		{"|ns=p", "", key.ReasonMalformed},
		{"ns=p||id=1", "", key.ReasonMalformed},
		{"id=1", key.DimNamespace, key.ReasonMissing},
		{"id=1|ns=p", key.DimNamespace, key.ReasonMalformed},
		{"ns=p|id=1|t=a", key.DimTenant, key.ReasonMalformed},
		{"ns=p|t=a|t=b", key.DimTenant, key.ReasonMalformed},
		{"ns=p|x.a=1|t=a", key.DimTenant, key.ReasonMalformed},
		{"ns=p|x.b=1|x.a=1", "a", key.ReasonMalformed},
		{"ns=p|x.a=1|x.a=1", "a", key.ReasonMalformed},
		{"ns=p|x.tenant=a", key.DimTenant, key.ReasonInvalidName},
		{"ns=p|x.A=1", "A", key.ReasonInvalidName},
		{"ns=p|x.=1", "", key.ReasonInvalidName},
		{"ns=p|tenant=a", "", key.ReasonMalformed},
		{"ns=p|id=a=b", key.DimID, key.ReasonMalformed},
		{"ns=p|id=%7c", key.DimID, key.ReasonMalformed},
		{"ns=p|id=%41", key.DimID, key.ReasonMalformed},
		{"ns=p|id=%2", key.DimID, key.ReasonMalformed},
		{"ns=p|id=%", key.DimID, key.ReasonMalformed},
		{"ns=p|id=a\x00", key.DimID, key.ReasonControlChar},
		{"ns=p|id=\xff", key.DimID, key.ReasonInvalidUTF8},
		{"ns=p|id=" + strings.Repeat("a", key.MaxValueLen+1), key.DimID, key.ReasonTooLong},
		{"ns=p" + strings.Repeat("|x.a=1", 1000), "a", key.ReasonMalformed},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%.40q", tt.in), func(t *testing.T) {
			p, err := key.Parse(tt.in)
			if err == nil {
				t.Fatalf("Parse = %+v, want error", p)
			}
			var ke *key.Error
			if !errors.As(err, &ke) || !errors.Is(err, key.ErrInvalid) {
				t.Fatalf("error %v is not a *key.Error wrapping ErrInvalid", err)
			}
			if ke.Dim != tt.dim || ke.Reason != tt.reason {
				t.Errorf("got Dim=%q Reason=%q, want Dim=%q Reason=%q (%v)", ke.Dim, ke.Reason, tt.dim, tt.reason, err)
			}
		})
	}

	// Too many extras is caught while scanning, before the whole input is
	// decoded.
	var sb strings.Builder
	sb.WriteString("ns=p")
	for i := range 1000 {
		fmt.Fprintf(&sb, "|x.d%04d=1", i)
	}
	var ke *key.Error
	if _, err := key.Parse(sb.String()); !errors.As(err, &ke) || ke.Reason != key.ReasonTooManyDims {
		t.Errorf("Parse of 1000 extras: %v, want ReasonTooManyDims", err)
	}
}

// TestParseIgnoresMaxLen: the length bound is the writer's policy, so a key
// built with a raised MaxLen must still parse.
func TestParseIgnoresMaxLen(t *testing.T) {
	full := strings.Repeat("é", key.MaxValueLen/2)
	k := key.New("p").Version(full).Tenant(full).ID(full).Locale(full).Currency(full).MaxLen(4096).MustBuild()
	if len(k) <= key.DefaultMaxLen {
		t.Fatalf("test key too short: %d", len(k))
	}
	if _, err := key.Parse(k); err != nil {
		t.Fatalf("Parse: %v", err)
	}
}

func partsEqual(a, b key.Parts) bool {
	return a.Namespace == b.Namespace && a.Version == b.Version && a.Tenant == b.Tenant &&
		a.ID == b.ID && a.Locale == b.Locale && a.Currency == b.Currency && a.Scope == b.Scope &&
		slices.Equal(a.Extras, b.Extras)
}
