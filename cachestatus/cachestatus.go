// Package cachestatus renders the Cache-Status response header field of
// RFC 9211: one cache's entry, its parameters in the RFC's order. Both the
// reference service (cmd/productd) and the HTTP caching layer (module
// httpflight) report through it.
package cachestatus

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// Forward reasons (RFC 9211 §2.2): why the cache forwarded the request.
const (
	FwdBypass   = "bypass"    // the cache was configured not to handle the request
	FwdMethod   = "method"    // the request method's semantics require forwarding
	FwdURIMiss  = "uri-miss"  // the cache had no entry for the request's URI
	FwdVaryMiss = "vary-miss" // the cache had entries, none for the request's Vary values
	FwdMiss     = "miss"      // the cache had no usable entry (or cannot tell why)
	FwdRequest  = "request"   // the request's own directives asked for forwarding
	FwdStale    = "stale"     // the cache had a stale entry and forwarded to validate or refresh it
	FwdPartial  = "partial"   // the cache had a partial response
)

// Entry is one cache's Cache-Status entry. The zero value of each field
// leaves its parameter out.
type Entry struct {
	// Cache is the cache's name, an RFC 8941 token (or it is sent as a
	// string).
	Cache string
	// Hit: served from the cache, nothing forwarded (§2.1).
	Hit bool
	// Fwd is why the request was forwarded (§2.2), one of the Fwd
	// constants.
	Fwd string
	// FwdStatus is the status the forwarded request got (§2.3), when it
	// differs from the response's own.
	FwdStatus int
	// Stored: the response was stored (§2.5).
	Stored bool
	// Collapsed: the request shared another request's forward (§2.6).
	Collapsed bool
	// TTL is the response's remaining freshness (§2.4), sent when HasTTL,
	// in whole seconds rounded away from zero (TTLSeconds).
	TTL    time.Duration
	HasTTL bool
	// Detail is what the RFC has no parameter for (§2.8), an RFC 8941
	// token.
	Detail string
}

// String renders e, for example "flightcache; fwd=miss; stored; ttl=300".
func (e Entry) String() string {
	var sb strings.Builder
	sb.WriteString(item(e.Cache))
	param := func(p string) { sb.WriteString("; "); sb.WriteString(p) }
	if e.Hit {
		param("hit")
	}
	if e.Fwd != "" {
		param("fwd=" + e.Fwd)
	}
	if e.FwdStatus != 0 {
		param("fwd-status=" + strconv.Itoa(e.FwdStatus))
	}
	if e.Stored {
		param("stored")
	}
	if e.Collapsed {
		param("collapsed")
	}
	if e.HasTTL {
		param("ttl=" + strconv.FormatInt(TTLSeconds(e.TTL), 10))
	}
	if e.Detail != "" {
		param("detail=" + item(e.Detail))
	}
	return sb.String()
}

// item is s as an RFC 8941 token when it is one, else as a string.
func item(s string) string {
	token := s != "" && (isAlpha(s[0]) || s[0] == '*')
	for i := 1; token && i < len(s); i++ {
		c := s[i]
		token = isAlpha(c) || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
	}
	if token {
		return s
	}
	var sb strings.Builder
	sb.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			sb.WriteByte('\\')
			sb.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			sb.WriteByte(c)
		default:
			sb.WriteByte('?')
		}
	}
	sb.WriteByte('"')
	return sb.String()
}

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// TTLSeconds rounds d to whole seconds away from zero: a fresh response's
// ttl up, so that a client waiting ttl seconds is sure to see it expired,
// and a stale one's down, so that it is never shown as ttl=0, which reads
// as fresh.
func TTLSeconds(d time.Duration) int64 {
	if d < 0 {
		return int64(math.Floor(d.Seconds()))
	}
	return int64(math.Ceil(d.Seconds()))
}
