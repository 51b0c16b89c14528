// Package key builds canonical, collision-free cache keys.
//
// # Why every dimension belongs in the key
//
// A cache key is a promise that any two requests mapping to it may share one
// answer. If some input that changes the answer is left out of the key, the
// first request to fill the entry decides the answer for everyone: a price
// rendered in EUR is served to a USD customer, a page filtered for an admin
// is served to a guest, and — worst — one tenant's data is served to
// another. With single-flight loading the damage is amplified, since the
// one load in flight is handed to every concurrent waiter. So a key must
// name the namespace (entity type), schema version, tenant, entity ID,
// locale, currency, permission scope and any other input the value depends
// on. Builder has a method for each common dimension and Dim for the rest;
// Require lets a service declare once which dimensions its keys must carry,
// so forgetting one is an error rather than a silent leak.
//
// Conversely, two different tuples of dimensions must never produce the
// same key. Naive joins fail this: with ":" as separator, tenant "a:b" with
// ID "c" and tenant "a" with ID "b:c" both give "a:b:c". This package's
// encoding is injective by construction, and Parse inverts it.
//
// # Format
//
// A key is a sequence of segments joined by '|'. Each segment is tag=value:
//
//	ns=product|v=3|t=acme|id=42|loc=de-DE|cur=EUR|scope=admin|x.channel=web
//
// The built-in tags, in their fixed order, are ns (namespace, always
// present), v, t, id, loc, cur and scope; absent dimensions have no segment.
// Extra dimensions follow, tagged "x." plus their name, sorted by name. In
// values, and only there, the three bytes '%', '|' and '=' are written as
// "%25", "%7C" and "%3D"; everything else is written as is, so keys stay
// readable in redis-cli. Values must be non-empty valid UTF-8 without
// control characters, at most MaxValueLen bytes; extra dimension names
// match [a-z][a-z0-9_-]* and are at most MaxNameLen bytes.
//
// # Injectivity
//
// Decoding a key recovers its dimensions uniquely, so no two different sets
// of dimensions can share a key:
//
//  1. Escaped values contain no '|' and no '=', and tags contain neither,
//     so splitting the key on '|' yields exactly the segments, and
//     splitting each segment at its first '=' yields exactly its tag and
//     escaped value.
//  2. The escaping is a prefix-free code ('%' appears only as the start of
//     one of three fixed escapes), so each escaped value decodes to exactly
//     one value.
//  3. Built-in tags never start with "x.", so a tag determines whether the
//     segment is a built-in or an extra dimension and which one; each tag
//     appears at most once (built-ins are set at most once, duplicate extra
//     names are rejected).
//  4. Absent dimensions have no segment and present ones have a non-empty
//     value, so "absent" and "empty" cannot be confused.
//
// Because segments are written in a fixed order, the key depends only on the
// set of dimensions, not on the order of builder calls. Parse accepts only
// keys in this canonical form, so Build and Parse are mutual inverses.
//
// Values are compared byte for byte: "EUR" and "eur", or a precomposed and a
// decomposed "é", are different keys. That is safe (they cannot collide) but
// wastes cache space, so normalise values before building keys.
//
// # Prefixes
//
// Builder.Prefix returns what the keys sharing some leading dimensions
// begin with, for bulk invalidation: the prefix of {tenant acme, ID 42},
// "ns=product|v=3|t=acme|id=42|", starts every key of product 42 whatever
// its locale, currency or extra dimensions, and no key of ID 420 or tenant
// acme2, since it ends with the separator that ends a value. A prefix is
// defined only for dimensions that lead in canonical order: a Builder that
// leaves a dimension unset before a later one it sets (tenant and locale
// without ID) is refused, because the keys carrying that dimension would
// not start with it.
//
// # Templates
//
// Builder methods return a modified copy and never change their receiver,
// so a package-level Builder works as a template that is safe to share
// between goroutines:
//
//	var productKey = key.New("product").Version("3").
//		Require(key.DimTenant, key.DimID, key.DimLocale, key.DimCurrency)
//
//	k, err := productKey.Tenant(t).ID(id).Locale(loc).Currency(cur).Build()
package key
