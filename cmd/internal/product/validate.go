package product

import (
	"strings"
	"unicode/utf8"
)

// Bounds of the identifiers in a Ref.
const (
	MaxIDLen     = 64
	MaxTenantLen = 64
	// MaxLocaleLen bounds a locale tag. BCP 47 allows longer tags (with
	// extensions), but a catalog is never keyed by them and an unbounded
	// tag is an unbounded cache key.
	MaxLocaleLen = 35
)

// NewRef validates and normalises the four parts of a product reference:
//
//   - tenant: 1-64 of [a-z0-9-], starting with a letter or digit;
//   - id: ^[A-Za-z0-9_-]{1,64}$;
//   - locale: a well-formed BCP 47 tag of language, optional script, optional
//     region and variants (no extensions or private use), case-normalised
//     ("EN-us" becomes "en-US") so that one locale is one cache key;
//   - currency: an ISO 4217 code, three ASCII letters, upper-cased.
//
// A failure is a *InvalidError naming the first bad field.
func NewRef(tenant, id, locale, currency string) (Ref, error) {
	if err := checkTenant(tenant); err != nil {
		return Ref{}, err
	}
	if err := checkID(id); err != nil {
		return Ref{}, err
	}
	loc, err := CanonicalLocale(locale)
	if err != nil {
		return Ref{}, err
	}
	cur, err := CanonicalCurrency(currency)
	if err != nil {
		return Ref{}, err
	}
	return Ref{Tenant: tenant, ID: id, Locale: loc, Currency: cur}, nil
}

// CheckTenant validates a tenant: 1-64 of [a-z0-9-], starting with a
// letter or digit.
func CheckTenant(t string) error { return checkTenant(t) }

func checkTenant(t string) error {
	if t == "" || len(t) > MaxTenantLen {
		return &InvalidError{Field: "tenant", Reason: "must be 1 to 64 characters"}
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(isLower(c) || isDigit(c) || (c == '-' && i > 0)) {
			return &InvalidError{Field: "tenant", Reason: "must be lower-case letters, digits and '-', starting with a letter or digit"}
		}
	}
	return nil
}

// CheckID validates a product ID against ^[A-Za-z0-9_-]{1,64}$.
func CheckID(id string) error { return checkID(id) }

func checkID(id string) error {
	if id == "" || len(id) > MaxIDLen {
		return &InvalidError{Field: "id", Reason: "must be 1 to 64 characters"}
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(isLower(c) || isUpper(c) || isDigit(c) || c == '_' || c == '-') {
			return &InvalidError{Field: "id", Reason: "must match ^[A-Za-z0-9_-]{1,64}$"}
		}
	}
	return nil
}

// CanonicalCurrency validates an ISO 4217 alphabetic code and returns it
// upper-cased.
func CanonicalCurrency(c string) (string, error) {
	if len(c) != 3 {
		return "", &InvalidError{Field: "currency", Reason: "must be an ISO 4217 code of three letters"}
	}
	var b [3]byte
	for i := 0; i < 3; i++ {
		switch ch := c[i]; {
		case isUpper(ch):
			b[i] = ch
		case isLower(ch):
			b[i] = ch - 'a' + 'A'
		default:
			return "", &InvalidError{Field: "currency", Reason: "must be an ISO 4217 code of three letters"}
		}
	}
	return string(b[:]), nil
}

// CanonicalLocale validates a BCP 47 language tag (RFC 5646 langtag without
// extlang, extensions or private use) and returns it in canonical case:
// language lower, script title, region upper, variants lower.
func CanonicalLocale(tag string) (string, error) {
	bad := func(reason string) (string, error) {
		return "", &InvalidError{Field: "locale", Reason: reason}
	}
	if tag == "" || len(tag) > MaxLocaleLen || !utf8.ValidString(tag) {
		return bad("must be a BCP 47 tag of 1 to 35 characters, such as en-US")
	}
	subtags := strings.Split(tag, "-")
	out := make([]string, 0, len(subtags))
	// The subtags must appear in this order, each kind at most once except
	// variants.
	const (
		stLanguage = iota
		stScript
		stRegion
		stVariant
	)
	state := stLanguage
	for i, s := range subtags {
		if s == "" || !isAlnumString(s) {
			return bad("subtags must be letters or digits separated by '-'")
		}
		if i == 0 {
			if !isAlphaString(s) || !(len(s) >= 2 && len(s) <= 3 || len(s) >= 5 && len(s) <= 8) {
				return bad("must start with a language subtag of 2-3 or 5-8 letters")
			}
			out = append(out, strings.ToLower(s))
			state = stScript
			continue
		}
		switch {
		case state <= stScript && len(s) == 4 && isAlphaString(s):
			out = append(out, strings.ToUpper(s[:1])+strings.ToLower(s[1:]))
			state = stRegion
		case state <= stRegion && (len(s) == 2 && isAlphaString(s) || len(s) == 3 && isDigitString(s)):
			out = append(out, strings.ToUpper(s))
			state = stVariant
		case len(s) >= 5 && len(s) <= 8 || len(s) == 4 && isDigit(s[0]):
			out = append(out, strings.ToLower(s))
			state = stVariant
		default:
			return bad("is not a well-formed BCP 47 tag (language[-Script][-REGION][-variant])")
		}
	}
	return strings.Join(out, "-"), nil
}

func checkDisplayName(s string) error {
	if s == "" || len(s) > MaxDisplayNameLen || !utf8.ValidString(s) {
		return &InvalidError{Field: "displayName", Reason: "must be 1 to 200 bytes of UTF-8"}
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) {
			return &InvalidError{Field: "displayName", Reason: "must not contain control characters"}
		}
		// U+FFFD is what a decoder leaves for bytes or escapes it could
		// not decode (encoding/json turns invalid UTF-8 and lone
		// surrogates into it): storing it would silently corrupt a name.
		if r == utf8.RuneError {
			return &InvalidError{Field: "displayName", Reason: "must not contain U+FFFD or undecodable text"}
		}
	}
	return nil
}

func isLower(c byte) bool { return 'a' <= c && c <= 'z' }
func isUpper(c byte) bool { return 'A' <= c && c <= 'Z' }
func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isAlphaString(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isLower(s[i]) && !isUpper(s[i]) {
			return false
		}
	}
	return true
}

func isDigitString(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

func isAlnumString(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isLower(s[i]) && !isUpper(s[i]) && !isDigit(s[i]) {
			return false
		}
	}
	return true
}
