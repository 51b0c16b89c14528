package key

import (
	"math"
	"strings"
	"unicode/utf8"
)

// Names of the built-in dimensions, as used in Require and Error.Dim. They
// are reserved: Dim rejects them so that, for example, the tenant can only
// ever live in one place in a key.
const (
	DimNamespace = "namespace"
	DimVersion   = "version"
	DimTenant    = "tenant"
	DimID        = "id"
	DimLocale    = "locale"
	DimCurrency  = "currency"
	DimScope     = "scope"
)

// Limits enforced by Build.
const (
	// MaxValueLen bounds each value, in bytes before escaping.
	MaxValueLen = 256
	// MaxNameLen bounds the name of an extra dimension, in bytes.
	MaxNameLen = 64
	// MaxDims bounds the number of extra dimensions. A key with more than a
	// handful is usually caching something too specific to be reused.
	MaxDims = 16
	// DefaultMaxLen is the default bound on the encoded key, in bytes.
	DefaultMaxLen = 1024
)

// Built-in fields in canonical order; the order is part of the format.
const (
	fNamespace = iota
	fVersion
	fTenant
	fID
	fLocale
	fCurrency
	fScope
	numFields
)

var fieldNames = [numFields]string{DimNamespace, DimVersion, DimTenant, DimID, DimLocale, DimCurrency, DimScope}

// fieldTags are the short on-the-wire tags. They must contain neither '|'
// nor '=' and must not start with extraPrefix.
var fieldTags = [numFields]string{"ns", "v", "t", "id", "loc", "cur", "scope"}

// extraPrefix keeps extra-dimension tags disjoint from built-in tags, so no
// name choice can make an extra dimension impersonate the tenant.
const extraPrefix = "x."

// Extra is one free-form dimension of a key.
type Extra struct {
	Name  string
	Value string
}

// Builder assembles a key. Its methods take and return Builder values, never
// mutate the receiver, and so a Builder can be a shared template: declare
// the namespace, version and required dimensions once in a package-level
// variable and derive per-request keys from it, concurrently, without
// cloning or locking.
//
// Setting a built-in dimension again replaces its value, so a derived
// Builder can override a template's Version; extra dimensions cannot be
// replaced (see Dim).
//
// The zero Builder is usable but has no namespace, so Build reports it
// missing; start from New.
type Builder struct {
	vals     [numFields]string
	set      uint8 // bit i: vals[i] was set (possibly to "", which Build rejects)
	required uint8 // bit i: field i must be set
	// extras is kept sorted by name so Build needs no sorting; it is
	// replaced, never appended to in place, because copies of a Builder
	// share its backing array.
	extras    []Extra
	reqExtras []string // same copy-on-write rule as extras
	maxLen    int      // <= 0 means DefaultMaxLen
}

// New returns a Builder for keys in namespace, which is typically the entity
// type ("product", "user"). The namespace is always required: without it,
// product 42 and user 42 would share a key.
func New(namespace string) Builder {
	return Builder{}.setField(fNamespace, namespace)
}

func (b Builder) setField(i int, v string) Builder {
	b.vals[i] = v
	b.set |= 1 << i
	return b
}

// Version sets the schema version of the cached value. Bump it when the
// shape of the value changes so old and new code never read each other's
// entries during a deploy.
func (b Builder) Version(v string) Builder { return b.setField(fVersion, v) }

// Tenant sets the tenant. Leaving it out of a key for per-tenant data leaks
// one tenant's data to another; Require(DimTenant) turns that mistake into
// an error.
func (b Builder) Tenant(t string) Builder { return b.setField(fTenant, t) }

// ID sets the identifier of the entity within the namespace.
func (b Builder) ID(id string) Builder { return b.setField(fID, id) }

// Locale sets the locale the value was rendered for. Values are compared
// byte-for-byte, so normalise ("en-US" vs "en_us") before calling.
func (b Builder) Locale(l string) Builder { return b.setField(fLocale, l) }

// Currency sets the currency prices in the value are expressed in.
func (b Builder) Currency(c string) Builder { return b.setField(fCurrency, c) }

// Scope sets the permission scope the value was computed under, so a value
// filtered for a restricted role is never served to another role or back.
func (b Builder) Scope(s string) Builder { return b.setField(fScope, s) }

// Dim adds an extra dimension. Order of Dim calls does not matter: Build
// sorts extra dimensions by name. Adding the same name twice is an error
// (reported by Build), not an overwrite, because two different values for
// one dimension mean the caller is confused about what the key represents.
func (b Builder) Dim(name, value string) Builder {
	i := len(b.extras)
	for i > 0 && b.extras[i-1].Name > name {
		i--
	}
	ext := make([]Extra, len(b.extras)+1)
	copy(ext, b.extras[:i])
	ext[i] = Extra{Name: name, Value: value}
	copy(ext[i+1:], b.extras[i:])
	b.extras = ext
	return b
}

// Require makes Build fail with ReasonMissing unless every named dimension
// is set. Names are the Dim* constants or extra dimension names. Requirements
// accumulate and are inherited by Builders derived from this one, which is
// what makes a template enforce them.
func (b Builder) Require(dims ...string) Builder {
	var extra []string
	for _, d := range dims {
		if i := fieldIndex(d); i >= 0 {
			b.required |= 1 << i
			continue
		}
		extra = append(extra, d)
	}
	if len(extra) > 0 {
		r := make([]string, 0, len(b.reqExtras)+len(extra))
		b.reqExtras = append(append(r, b.reqExtras...), extra...)
	}
	return b
}

// MaxLen sets the bound on the encoded key length in bytes. n <= 0 restores
// DefaultMaxLen. Lower it for stores with short key limits (memcached: 250).
func (b Builder) MaxLen(n int) Builder {
	b.maxLen = n
	return b
}

// Build validates the dimensions and returns the canonical key. Every
// failure is an *Error wrapping ErrInvalid. Only the first failure is
// reported, built-in dimensions being checked in canonical order before
// extras, so the error does not depend on the order of builder calls.
func (b Builder) Build() (string, error) {
	limit := b.maxLen
	if limit <= 0 {
		limit = DefaultMaxLen
	}
	return b.build(limit)
}

// MustBuild is Build for keys made of constants in tests and examples. It
// panics with the *Error if Build fails, so never use it on request input.
func (b Builder) MustBuild() string {
	k, err := b.Build()
	if err != nil {
		panic(err)
	}
	return k
}

// Prefix returns the beginning shared by the keys of the dimensions set so
// far, for bulk invalidation (flightcache's Cache.InvalidatePrefix): their
// encoding in canonical order, ending with the segment separator '|'. It is
// a prefix of every key Build produces from this Builder after further
// dimensions that come later in canonical order are set:
//
//   - the built-in dimensions after the last one set, in the order
//     namespace, version, tenant, ID, locale, currency, scope;
//   - then the extra dimensions whose names sort after the last extra
//     dimension set (every extra dimension, if none is set).
//
// The trailing separator ends the last value, so the prefix of
// {tenant acme, ID 42} matches the keys of ID 42 in every locale, currency,
// scope and extra dimension, and never those of ID 420 or tenant acme2 (a
// '|' inside a value is escaped). More generally it matches no key that
// lacks a dimension set here or holds a different value for it. Nor does it
// match the key of exactly these dimensions, which has no trailing
// separator: that key is Build's, and is invalidated on its own.
//
// Because a dimension left unset has no segment, the prefix also excludes
// every key that carries one placed before a dimension set here. Prefix
// therefore refuses, with ReasonPrefixGap naming the unset dimension, a
// Builder that leaves
//
//   - a dimension of Require unset before the last dimension set: every
//     key carries it, so the prefix would match none;
//   - a built-in dimension from tenant to scope unset between two set ones
//     (extra dimensions counting as after scope), such as tenant and locale
//     without ID: the keys of that tenant and locale that have an ID would
//     not match.
//
// Dimensions before the first one set may be unset: the version is
// optional, and the prefix of {namespace, ID} matches the keys built
// without a tenant, as a single-tenant service builds them. Extra dimension
// names are open, so an extra dimension that sorts before the last one set
// is a gap only when required.
//
// Values are checked as by Build, and every failure is an *Error wrapping
// ErrInvalid; the prefix without its separator must fit MaxLen.
func (b Builder) Prefix() (string, error) {
	limit := b.maxLen
	if limit <= 0 {
		limit = DefaultMaxLen
	}
	return b.encode(limit, true)
}

func (b Builder) build(limit int) (string, error) {
	return b.encode(limit, false)
}

// encode writes the key (Build) or, with prefix, the prefix (Prefix).
func (b Builder) encode(limit int, prefix bool) (string, error) {
	// Pass 1 validates and measures so that pass 2 can write the key with
	// exactly one allocation.
	n, err := b.measure(prefix)
	if err != nil {
		return "", err
	}
	if n > limit {
		return "", lengthError("", ReasonKeyTooLong, n, limit)
	}
	if prefix {
		n++
	}

	var sb strings.Builder
	sb.Grow(n)
	for i := range numFields {
		if b.set&(1<<i) == 0 {
			continue
		}
		if i != fNamespace {
			sb.WriteByte('|')
		}
		sb.WriteString(fieldTags[i])
		sb.WriteByte('=')
		writeEscaped(&sb, b.vals[i])
	}
	for _, e := range b.extras {
		sb.WriteByte('|')
		sb.WriteString(extraPrefix)
		sb.WriteString(e.Name)
		sb.WriteByte('=')
		writeEscaped(&sb, e.Value)
	}
	if prefix {
		sb.WriteByte('|')
	}
	return sb.String(), nil
}

// measure validates the dimensions and returns the length of their
// encoding (without Prefix's trailing separator). For Build every required
// dimension must be set; for Prefix only those before the last dimension
// set, and no built-in dimension may be missing between two set ones.
func (b Builder) measure(prefix bool) (int, error) {
	// For Prefix: last is the position of the last dimension set
	// (numFields for any extra), first that of the first one set from the
	// tenant on.
	last, first := fNamespace, numFields
	if prefix {
		last, first = b.bounds()
	}

	n := -1 // no separator before the first segment
	for i := range numFields {
		if b.set&(1<<i) == 0 {
			required := b.required&(1<<i) != 0
			switch {
			case i == fNamespace || !prefix && required:
				return 0, newError(fieldNames[i], ReasonMissing)
			case prefix && i < last && (required || i > first):
				return 0, prefixGap(fieldNames[i])
			}
			continue
		}
		el, err := checkValue(fieldNames[i], b.vals[i])
		if err != nil {
			return 0, err
		}
		n += 1 + len(fieldTags[i]) + 1 + el
	}
	if len(b.extras) > MaxDims {
		return 0, tooManyDims(len(b.extras))
	}
	// Names before values: equal names sit in call order, so checking a
	// value first would make the reported error depend on that order.
	for j, e := range b.extras {
		if !validName(e.Name) || fieldIndex(e.Name) >= 0 {
			return 0, newError(e.Name, ReasonInvalidName)
		}
		if j > 0 && b.extras[j-1].Name == e.Name {
			return 0, newError(e.Name, ReasonDuplicate)
		}
	}
	for _, e := range b.extras {
		el, err := checkValue(e.Name, e.Value)
		if err != nil {
			return 0, err
		}
		n += 1 + len(extraPrefix) + len(e.Name) + 1 + el
	}
	for _, r := range b.reqExtras {
		if !validName(r) {
			return 0, newError(r, ReasonInvalidName)
		}
		if b.hasExtra(r) {
			continue
		}
		if !prefix {
			return 0, newError(r, ReasonMissing)
		}
		if len(b.extras) > 0 && r < b.extras[len(b.extras)-1].Name {
			return 0, prefixGap(r)
		}
	}
	return n, nil
}

// bounds returns the positions in canonical order of the last dimension
// set (numFields when an extra dimension is) and of the first one set from
// the tenant on (numFields when none is).
func (b Builder) bounds() (last, first int) {
	last, first = fNamespace, numFields
	for i := fTenant; i < numFields; i++ {
		if b.set&(1<<i) != 0 {
			first = i
			break
		}
	}
	for i := numFields - 1; i > fNamespace; i-- {
		if b.set&(1<<i) != 0 {
			last = i
			break
		}
	}
	if len(b.extras) > 0 {
		last = numFields
	}
	return last, first
}

func (b Builder) hasExtra(name string) bool {
	// Linear: at most MaxDims entries by the time this runs.
	for _, e := range b.extras {
		if e.Name == name {
			return true
		}
	}
	return false
}

func fieldIndex(name string) int {
	for i, n := range fieldNames {
		if n == name {
			return i
		}
	}
	return -1
}

// validName reports whether name is [a-z][a-z0-9_-]{0,MaxNameLen-1}. Names
// are chosen by programmers, not users, so a narrow alphabet costs nothing
// and keeps them free of separators and look-alikes (no "Tenant" next to
// "tenant").
func validName(name string) bool {
	if name == "" || len(name) > MaxNameLen || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := 1; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// checkValue validates v and returns its escaped length.
func checkValue(dim, v string) (int, error) {
	if v == "" {
		return 0, newError(dim, ReasonEmpty)
	}
	if len(v) > MaxValueLen {
		return 0, lengthError(dim, ReasonTooLong, len(v), MaxValueLen)
	}
	n := len(v)
	for i := 0; i < len(v); {
		c := v[i]
		if c < utf8.RuneSelf {
			switch {
			case c < 0x20 || c == 0x7f:
				return 0, newError(dim, ReasonControlChar)
			case needsEscape(c):
				n += 2
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(v[i:])
		if r == utf8.RuneError && size == 1 {
			return 0, newError(dim, ReasonInvalidUTF8)
		}
		if r <= 0x9f { // C1 controls U+0080..U+009F
			return 0, newError(dim, ReasonControlChar)
		}
		i += size
	}
	return n, nil
}

// needsEscape lists the bytes with syntactic meaning in a key: the segment
// separator, the tag separator, and the escape character itself.
func needsEscape(c byte) bool { return c == '|' || c == '=' || c == '%' }

// Escapes are fixed upper-case so that each byte has exactly one encoding;
// Parse rejects any other spelling.
const (
	escPercent = "%25"
	escPipe    = "%7C"
	escEquals  = "%3D"
)

func writeEscaped(sb *strings.Builder, v string) {
	// A byte loop beats strings.IndexAny here: values are short and
	// IndexAny falls back to per-rune searching for a multi-byte set.
	start := 0
	for i := 0; i < len(v); i++ {
		var esc string
		switch v[i] {
		case '%':
			esc = escPercent
		case '|':
			esc = escPipe
		case '=':
			esc = escEquals
		default:
			continue
		}
		sb.WriteString(v[start:i])
		sb.WriteString(esc)
		start = i + 1
	}
	sb.WriteString(v[start:])
}

// noLimit is used by Parse: the total length bound is a policy for writers,
// not part of what makes a key canonical.
const noLimit = math.MaxInt
