package httpflight

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/flightcache/flightcache/key"
)

// The key of a request (package key): the namespace (Options.Namespace),
// the origin (scheme and host) as the tenant, the path as the ID, then the
// extra dimensions m (the method), q (the canonical query), h-<name> (each
// header of Options.KeyHeaders) and, for the variants a response's Vary
// asks for, vary; rv and retry name the flights of a revalidation and of
// a retry after a failed shared load. The prefix of namespace, origin and path covers every
// key of a path, which is what an unsafe method invalidates.
//
// A value that the key package would refuse (longer than key.MaxValueLen,
// invalid UTF-8, control characters) is replaced by "#" and its SHA-256:
// no path (which starts with '/'), origin, canonical query or header
// value (which starts with ':') begins with '#', so the two forms never
// meet.

// keyValue is v as a key value: itself, or its digest.
func keyValue(v string) string {
	ok := v != "" && len(v) <= key.MaxValueLen && utf8.ValidString(v)
	for i := 0; ok && i < len(v); i++ {
		ok = v[i] >= 0x20 && v[i] != 0x7f
	}
	if ok {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return "#" + hex.EncodeToString(sum[:])
}

// origin is the scheme and host of r, in lower case.
func origin(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if r.URL.Scheme != "" {
		scheme = strings.ToLower(r.URL.Scheme)
	}
	host := r.Host
	if host == "" {
		host = r.URL.Host
	}
	return scheme + "://" + strings.ToLower(host)
}

// canonicalQuery sorts the query's parameters by name, keeping the order
// of one name's values (url.Values.Encode); a query Go cannot parse is
// kept as sent.
func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	v, err := url.ParseQuery(raw)
	if err != nil {
		return raw
	}
	return v.Encode()
}

// resourceBuilder is the key builder of the resource u on origin o (the
// namespace, origin and path), the part an invalidation names.
func (l *Layer) resourceBuilder(o string, u *url.URL) key.Builder {
	p := u.EscapedPath()
	if p == "" {
		p = "/"
	}
	return key.New(l.opts.Namespace).Tenant(keyValue(o)).ID(keyValue(p))
}

// requestBuilder is the builder of r's primary key: method, origin,
// path, canonical query and the declared headers.
func (l *Layer) requestBuilder(r *http.Request) key.Builder {
	b := l.resourceBuilder(origin(r), r.URL).Dim("m", r.Method)
	if q := canonicalQuery(r.URL.RawQuery); q != "" {
		b = b.Dim("q", keyValue(q))
	}
	for _, name := range l.keyHeaders {
		if values := r.Header.Values(name); len(values) > 0 {
			b = b.Dim("h-"+strings.ToLower(name), keyValue(":"+strings.Join(values, ", ")))
		}
	}
	return b
}

// varyNames is the list of header names the Vary of h names, in lower
// case; star reports a "*".
func varyNames(h http.Header) (names []string, star bool) {
	for _, field := range h.Values("Vary") {
		for _, n := range strings.Split(field, ",") {
			n = strings.ToLower(strings.TrimSpace(n))
			switch n {
			case "":
			case "*":
				star = true
			default:
				names = append(names, n)
			}
		}
	}
	return names, star
}

// variant is the canonical form of r's values of the header fields names
// (RFC 9111 §4.1): each name with its values joined by ", ", whitespace
// around them trimmed; an absent field differs from an empty one.
func variant(names []string, r *http.Request) string {
	if len(names) == 0 {
		return ""
	}
	var sb strings.Builder
	for _, n := range names {
		sb.WriteString(n)
		values := r.Header.Values(n)
		if values == nil {
			sb.WriteString("\x00absent\n")
			continue
		}
		sb.WriteByte(':')
		for i, v := range values {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString(strings.TrimSpace(v))
		}
		sb.WriteByte('\n')
	}
	return sb.String()
}
