package product

import (
	"errors"
	"strings"
	"testing"
)

func TestNewRefNormalisesValidInput(t *testing.T) {
	tests := []struct {
		tenant, id, locale, currency string
		want                         Ref
	}{
		{"acme", "p-00001", "en-US", "USD", Ref{"acme", "p-00001", "en-US", "USD"}},
		{"acme", "p_1", "EN-us", "usd", Ref{"acme", "p_1", "en-US", "USD"}},
		{"t-1", strings.Repeat("a", 64), "zh-hant-tw", "twd", Ref{"t-1", strings.Repeat("a", 64), "zh-Hant-TW", "TWD"}},
		{"0", "X", "es-419", "Eur", Ref{"0", "X", "es-419", "EUR"}},
		{"acme", "A", "de", "CHF", Ref{"acme", "A", "de", "CHF"}},
		{"acme", "A", "sl-rozaj-biske", "EUR", Ref{"acme", "A", "sl-rozaj-biske", "EUR"}},
		{"acme", "A", "de-CH-1996", "CHF", Ref{"acme", "A", "de-CH-1996", "CHF"}},
	}
	for _, tc := range tests {
		got, err := NewRef(tc.tenant, tc.id, tc.locale, tc.currency)
		if err != nil {
			t.Errorf("NewRef(%q, %q, %q, %q): %v", tc.tenant, tc.id, tc.locale, tc.currency, err)
			continue
		}
		if got != tc.want {
			t.Errorf("NewRef(%q, %q, %q, %q) = %+v, want %+v", tc.tenant, tc.id, tc.locale, tc.currency, got, tc.want)
		}
	}
}

func TestNewRefRejectsInvalidInputNamingTheField(t *testing.T) {
	tests := []struct {
		tenant, id, locale, currency string
		field                        string
	}{
		{"", "p1", "en-US", "USD", "tenant"},
		{"Acme", "p1", "en-US", "USD", "tenant"},
		{"-acme", "p1", "en-US", "USD", "tenant"},
		{"ac me", "p1", "en-US", "USD", "tenant"},
		{strings.Repeat("a", 65), "p1", "en-US", "USD", "tenant"},
		{"acme", "", "en-US", "USD", "id"},
		{"acme", strings.Repeat("a", 65), "en-US", "USD", "id"},
		{"acme", "p.1", "en-US", "USD", "id"},
		{"acme", "p/1", "en-US", "USD", "id"},
		{"acme", "p\x001", "en-US", "USD", "id"},
		{"acme", "pé", "en-US", "USD", "id"},
		{"acme", "p1", "", "USD", "locale"},
		{"acme", "p1", "en_US", "USD", "locale"},
		{"acme", "p1", "e", "USD", "locale"},
		{"acme", "p1", "en-", "USD", "locale"},
		{"acme", "p1", "en--US", "USD", "locale"},
		{"acme", "p1", "en-US-US", "USD", "locale"},
		{"acme", "p1", "en-x-private", "USD", "locale"},
		{"acme", "p1", "1234", "USD", "locale"},
		{"acme", "p1", strings.Repeat("a", 36), "USD", "locale"},
		{"acme", "p1", "en-US", "", "currency"},
		{"acme", "p1", "en-US", "US", "currency"},
		{"acme", "p1", "en-US", "USDX", "currency"},
		{"acme", "p1", "en-US", "U5D", "currency"},
	}
	for _, tc := range tests {
		_, err := NewRef(tc.tenant, tc.id, tc.locale, tc.currency)
		var ie *InvalidError
		if !errors.As(err, &ie) || !errors.Is(err, ErrInvalid) {
			t.Errorf("NewRef(%q, %q, %q, %q) = %v, want an *InvalidError", tc.tenant, tc.id, tc.locale, tc.currency, err)
			continue
		}
		if ie.Field != tc.field {
			t.Errorf("NewRef(%q, %q, %q, %q): field %q, want %q", tc.tenant, tc.id, tc.locale, tc.currency, ie.Field, tc.field)
		}
	}
}

func TestInvalidErrorNeverEchoesTheValue(t *testing.T) {
	const secret = "evil\nINJECTED"
	for _, in := range [][4]string{{secret, "p", "en", "USD"}, {"a", secret, "en", "USD"}, {"a", "p", secret, "USD"}, {"a", "p", "en", secret}} {
		_, err := NewRef(in[0], in[1], in[2], in[3])
		if err == nil || strings.Contains(err.Error(), "INJECTED") {
			t.Errorf("NewRef(%q) error %v: want an error without the input", in, err)
		}
	}
}

func TestPatchValidate(t *testing.T) {
	name, empty, ctl := "New name", "", "bad\x07"
	price, neg, huge := int64(100), int64(-1), int64(MaxPriceCents+1)
	tests := []struct {
		p  Patch
		ok bool
	}{
		{Patch{DisplayName: &name}, true},
		{Patch{PriceCents: &price}, true},
		{Patch{DisplayName: &name, PriceCents: &price}, true},
		{Patch{}, false},
		{Patch{DisplayName: &empty}, false},
		{Patch{DisplayName: &ctl}, false},
		{Patch{PriceCents: &neg}, false},
		{Patch{PriceCents: &huge}, false},
	}
	for i, tc := range tests {
		err := tc.p.Validate()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("case %d: Validate() = %v, want ok=%v", i, err, tc.ok)
		}
	}
}
