package key_test

import (
	"errors"
	"fmt"

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
