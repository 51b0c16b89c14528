package key

import "strings"

// Parts is a decoded key. A built-in field is "" exactly when the dimension
// was absent, because Build never accepts an empty value.
type Parts struct {
	Namespace string
	Version   string
	Tenant    string
	ID        string
	Locale    string
	Currency  string
	Scope     string
	// Extras is sorted by name and nil when there are none.
	Extras []Extra
}

// Parse decodes a key produced by Build. It accepts exactly the canonical
// keys: Parse(k) succeeds only if some Builder builds k, in which case that
// Builder's dimensions are returned. Parse therefore also serves as a check
// that a string read back from a store was produced by this package. The
// total-length bound (MaxLen) is not applied, since it is a policy of the
// writer; the per-value and per-count bounds are.
func Parse(k string) (Parts, error) {
	var b Builder
	last := -1 // last built-in field seen, to enforce canonical order
	for rest, more := k, true; more; {
		var seg string
		seg, rest, more = strings.Cut(rest, "|")
		tag, enc, ok := strings.Cut(seg, "=")
		if !ok {
			return Parts{}, malformed("", "segment without '='")
		}
		dim := ""
		name, isExtra := strings.CutPrefix(tag, extraPrefix)
		if isExtra {
			if !validName(name) || fieldIndex(name) >= 0 {
				return Parts{}, newError(name, ReasonInvalidName)
			}
			dim = name
			if n := len(b.extras); n > 0 && b.extras[n-1].Name >= name {
				return Parts{}, malformed(dim, "extra dimensions not in sorted order or repeated")
			}
			if len(b.extras) == MaxDims {
				return Parts{}, tooManyDims(MaxDims + 1)
			}
		} else {
			i := tagIndex(tag)
			if i < 0 {
				return Parts{}, malformed("", "unknown tag")
			}
			dim = fieldNames[i]
			if i <= last || len(b.extras) > 0 {
				return Parts{}, malformed(dim, "dimension out of canonical order or repeated")
			}
			last = i
		}
		val, ok := unescape(enc)
		if !ok {
			return Parts{}, malformed(dim, "invalid escape")
		}
		if isExtra {
			b.extras = append(b.extras, Extra{Name: name, Value: val})
		} else {
			b = b.setField(last, val)
		}
	}
	// Rebuilding and comparing is the simplest complete proof that k is
	// canonical: it re-runs every value check and catches anything the
	// syntax checks above might have let through.
	out, err := b.build(noLimit)
	if err != nil {
		return Parts{}, err
	}
	if out != k {
		return Parts{}, malformed("", "not in canonical form")
	}
	return Parts{
		Namespace: b.vals[fNamespace],
		Version:   b.vals[fVersion],
		Tenant:    b.vals[fTenant],
		ID:        b.vals[fID],
		Locale:    b.vals[fLocale],
		Currency:  b.vals[fCurrency],
		Scope:     b.vals[fScope],
		Extras:    b.extras,
	}, nil
}

func malformed(dim, detail string) *Error {
	return &Error{Dim: dim, Reason: ReasonMalformed, detail: detail}
}

func tagIndex(tag string) int {
	for i, t := range fieldTags {
		if t == tag {
			return i
		}
	}
	return -1
}

// unescape reverses writeEscaped, rejecting every spelling writeEscaped
// would not produce (raw '=', lower-case or unknown escapes) so that each
// key has one decoding and each value one encoding.
func unescape(s string) (string, bool) {
	if strings.IndexByte(s, '=') >= 0 {
		return "", false
	}
	if strings.IndexByte(s, '%') < 0 {
		return s, true // common case: no allocation, a substring of the key
	}
	var sb strings.Builder
	sb.Grow(len(s))
	for {
		i := strings.IndexByte(s, '%')
		if i < 0 {
			sb.WriteString(s)
			return sb.String(), true
		}
		sb.WriteString(s[:i])
		if len(s) < i+3 {
			return "", false
		}
		switch s[i : i+3] {
		case escPercent:
			sb.WriteByte('%')
		case escPipe:
			sb.WriteByte('|')
		case escEquals:
			sb.WriteByte('=')
		default:
			return "", false
		}
		s = s[i+3:]
	}
}
