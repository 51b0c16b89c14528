package key_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/flightcache/flightcache/key"
)

// productKey is declared once per service. Builders are immutable, so the
// template can be shared by every request goroutine.
var productKey = key.New("product").Version("3").
	Require(key.DimTenant, key.DimID, key.DimLocale, key.DimCurrency)

func Example() {
	k, err := productKey.Tenant("acme").ID("42").Locale("de-DE").Currency("EUR").Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(k)
	// Output: ns=product|v=3|t=acme|id=42|loc=de-DE|cur=EUR
}

func Example_validationError() {
	// The tenant was forgotten: the template turns that into an error
	// instead of a key shared by all tenants.
	_, err := productKey.ID("42").Locale("de-DE").Currency("EUR").Build()

	var ke *key.Error
	if errors.As(err, &ke) && ke.Reason == key.ReasonMissing {
		fmt.Println("missing:", ke.Dim)
	}
	fmt.Println(errors.Is(err, key.ErrInvalid))
	fmt.Println(err)
	// Output:
	// missing: tenant
	// true
	// key: tenant: missing required dimension
}

func ExampleBuilder_Dim() {
	// Extras are sorted by name, and separators in values are escaped.
	k := key.New("search").Tenant("acme").
		Dim("sort", "price").
		Dim("filter", "brand=ACME|color=red").
		MustBuild()
	fmt.Println(k)
	// Output: ns=search|t=acme|x.filter=brand%3DACME%7Ccolor%3Dred|x.sort=price
}

func ExampleParse() {
	p, err := key.Parse("ns=product|v=3|t=acme|id=42|x.channel=web")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Namespace, p.Version, p.Tenant, p.ID, p.Extras)

	// Anything Build would not have produced is rejected.
	_, err = key.Parse("ns=product|id=42|t=acme")
	fmt.Println(err)
	// Output:
	// product 3 acme 42 [{channel web}]
	// key: tenant: malformed key (dimension out of canonical order or repeated)
}

func ExampleBuilder_Prefix() {
	// Every variant of product 42 of tenant acme, for bulk invalidation.
	p, err := productKey.Tenant("acme").ID("42").Prefix()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p)

	for _, b := range []key.Builder{
		productKey.Tenant("acme").ID("42").Locale("de-DE").Currency("EUR"),
		productKey.Tenant("acme").ID("42").Locale("en-US").Currency("USD"),
		productKey.Tenant("acme").ID("420").Locale("de-DE").Currency("EUR"),
		productKey.Tenant("acme2").ID("42").Locale("de-DE").Currency("EUR"),
	} {
		k := b.MustBuild()
		fmt.Println(strings.HasPrefix(k, p), k)
	}

	// Tenant and locale without the ID between them cannot be a prefix:
	// the keys of that tenant and locale all carry an ID.
	_, err = productKey.Tenant("acme").Locale("de-DE").Prefix()
	fmt.Println(err)
	// Output:
	// ns=product|v=3|t=acme|id=42|
	// true ns=product|v=3|t=acme|id=42|loc=de-DE|cur=EUR
	// true ns=product|v=3|t=acme|id=42|loc=en-US|cur=USD
	// false ns=product|v=3|t=acme|id=420|loc=de-DE|cur=EUR
	// false ns=product|v=3|t=acme2|id=42|loc=de-DE|cur=EUR
	// key: id: gap in key prefix (unset, but a later dimension is set)
}
