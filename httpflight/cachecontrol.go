package httpflight

import (
	"errors"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// directives are the Cache-Control directives of a request or a response
// (RFC 9111 §5.2), names in lower case, values unquoted. A directive given
// twice keeps its first value.
type directives map[string]string

// parseCacheControl reads every Cache-Control field of h.
func parseCacheControl(h http.Header) directives { return parseDirectives(h.Values("Cache-Control")) }

// responseDirectives are the directives of a response for this cache: its
// CDN-Cache-Control (RFC 9213), the field targeted at caches like this
// one, when it has one, else its Cache-Control.
// A CDN-Cache-Control that is not a valid Structured Field dictionary
// (RFC 8941), or gives a delta-seconds directive a value that is not an
// integer, is ignored.
func responseDirectives(h http.Header) directives {
	if v := h.Values("CDN-Cache-Control"); len(v) > 0 && validTargeted(v) {
		return parseDirectives(v)
	}
	return parseCacheControl(h)
}

var (
	sfMember  = regexp.MustCompile(`^[a-z*][a-z0-9_.*-]*(=([0-9]{1,15}(\.[0-9]{1,3})?|"[^"\\]*"|[A-Za-z*][A-Za-z0-9:/!#$%&'*+.^_` + "`" + `|~-]*|\?[01]))?$`)
	sfInteger = regexp.MustCompile(`^[a-z-]+=[0-9]{1,15}$`)
)

func validTargeted(values []string) bool {
	for _, field := range values {
		for _, m := range strings.Split(field, ",") {
			m = strings.TrimSpace(m)
			if !sfMember.MatchString(m) {
				return false
			}
			name, _, hasValue := strings.Cut(m, "=")
			switch name {
			case "max-age", "s-maxage", "stale-while-revalidate", "stale-if-error":
				if !hasValue || !sfInteger.MatchString(m) {
					return false
				}
			}
		}
	}
	return true
}

// parseDirectives reads the directives of the fields values.
func parseDirectives(values []string) directives {
	if len(values) == 0 {
		return nil
	}
	d := directives{}
	for _, field := range values {
		for len(field) > 0 {
			var item string
			item, field = nextItem(field)
			name, value, _ := strings.Cut(item, "=")
			name = strings.ToLower(strings.TrimSpace(name))
			if name == "" {
				continue
			}
			value = strings.TrimSpace(value)
			if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
				value = strings.ReplaceAll(value[1:len(value)-1], `\`, "")
			}
			if _, seen := d[name]; !seen {
				d[name] = value
			}
		}
	}
	return d
}

// nextItem splits s at its first comma outside a quoted string.
func nextItem(s string) (item, rest string) {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if quoted {
				i++
			}
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				return s[:i], s[i+1:]
			}
		}
	}
	return s, ""
}

func (d directives) has(name string) bool { _, ok := d[name]; return ok }

// seconds returns the delta-seconds value of the directive name (RFC 9111
// §1.2.2): ok is false when the directive is absent; a value that is not a
// non-negative integer reads as 0 (the response is then stale at once), a
// value too large as 2^31 seconds.
func (d directives) seconds(name string) (time.Duration, bool) {
	v, ok := d[name]
	if !ok {
		return 0, false
	}
	return deltaSeconds(v), true
}

func deltaSeconds(v string) time.Duration {
	if v == "" {
		return 0
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0
		}
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n > math.MaxInt32 {
		n = math.MaxInt32 + 1
	}
	return time.Duration(n) * time.Second
}

// heuristicStatus holds the status codes that are heuristically cacheable
// (RFC 9110 §15.1).
var heuristicStatus = map[int]bool{200: true, 203: true, 204: true, 206: true, 300: true, 301: true, 308: true, 404: true, 405: true, 410: true, 414: true, 501: true}

// HeuristicFraction is the share of the time since Last-Modified that a
// response without explicit freshness is fresh for (RFC 9111 §4.2.2), and
// MaxHeuristic the most that heuristic grants.
const (
	HeuristicFraction = 0.1
	MaxHeuristic      = 24 * time.Hour
)

// freshnessLifetime is how long resp is fresh for a shared cache (RFC 9111
// §4.2.1): s-maxage, max-age, Expires minus Date, or the heuristic.
// heuristic reports that no explicit lifetime was given.
func freshnessLifetime(status int, h http.Header, cc directives, responseTime time.Time) (lifetime time.Duration, heuristic bool) {
	if v, ok := cc.seconds("s-maxage"); ok {
		return v, false
	}
	if v, ok := cc.seconds("max-age"); ok {
		return v, false
	}
	date := dateOf(h, responseTime)
	if ev := h.Values("Expires"); len(ev) > 0 {
		exp, err := parseHTTPDate(ev[0])
		if err != nil || len(ev) > 1 {
			return 0, false // an invalid Expires means "already expired" (§5.3)
		}
		return max(exp.Sub(date), 0), false
	}
	if !heuristicStatus[status] && !cc.has("public") {
		return 0, true
	}
	lm, err := parseHTTPDate(h.Get("Last-Modified"))
	if err != nil || !lm.Before(date) {
		return 0, true
	}
	return min(time.Duration(float64(date.Sub(lm))*HeuristicFraction), MaxHeuristic), true
}

// dateOf is the response's Date, or fallback when it has none or an
// invalid one.
func dateOf(h http.Header, fallback time.Time) time.Time {
	if d, err := parseHTTPDate(h.Get("Date")); err == nil {
		return d
	}
	return fallback
}

// facts are what the Layer reads of a stored response on every use,
// computed once from its header and times.
type facts struct {
	cc           directives
	lifetime     time.Duration // freshness lifetime (§4.2.1)
	heuristic    bool          // lifetime is the heuristic's, or none was given
	initialAge   time.Duration // corrected_initial_age (§4.2.3)
	vary         []string
	varyStar     bool
	hasValidator bool
}

// facts returns r's facts, computing them on first use. Responses are not
// changed once built, so two goroutines that compute them at once compute
// the same.
func (r *Response) facts() *facts {
	if f := r.known.Load(); f != nil {
		return f
	}
	f := &facts{cc: responseDirectives(r.Header)}
	f.lifetime, f.heuristic = freshnessLifetime(r.StatusCode, r.Header, f.cc, r.ResponseTime)
	apparent := max(r.ResponseTime.Sub(dateOf(r.Header, r.ResponseTime)), 0)
	ageValue := time.Duration(0)
	if v := r.Header.Get("Age"); v != "" {
		// The first of a list: a second value is a mistake (§5.1).
		first, _, _ := strings.Cut(v, ",")
		ageValue = deltaSeconds(strings.TrimSpace(first))
	}
	f.initialAge = max(apparent, ageValue+max(r.ResponseTime.Sub(r.RequestTime), 0))
	f.vary, f.varyStar = varyNames(r.Header)
	f.hasValidator = r.Header.Get("ETag") != "" || r.Header.Get("Last-Modified") != ""
	r.known.Store(f)
	return f
}

// currentAge is the response's age at now (RFC 9111 §4.2.3).
func (r *Response) currentAge(now time.Time) time.Duration {
	return r.facts().initialAge + max(now.Sub(r.ResponseTime), 0)
}

// httpDateLayouts are the three forms of an HTTP-date (RFC 9110 §5.6.7).
var httpDateLayouts = []string{http.TimeFormat, "Monday, 02-Jan-06 15:04:05 GMT", time.ANSIC}

// parseHTTPDate parses an HTTP-date strictly: a value that is not exactly
// one of its three forms (two spaces, a one-digit hour) is invalid, which
// for Expires means "already expired".
func parseHTTPDate(v string) (time.Time, error) {
	for _, layout := range httpDateLayouts {
		if t, err := time.Parse(layout, v); err == nil && t.Format(layout) == v {
			return t, nil
		}
	}
	return time.Time{}, errors.New("httpflight: invalid HTTP-date")
}
