package httpapi

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/internal/product"
)

// CacheStatus renders the RFC 9211 Cache-Status header value for one
// product response: the cache's name, then "hit" or "fwd=miss", then
// "stored" or "collapsed" for a miss, then "ttl" (remaining freshness in
// whole seconds, rounded up so that a client waiting ttl seconds is sure to
// see the entry expired; negative when a stale value was served) when
// known, then a "detail" that names what RFC 9211 has no parameter for.
//
//	flightcache; hit; ttl=42
//	flightcache; fwd=miss; stored; ttl=300
//	flightcache; fwd=miss; collapsed; ttl=300
//	flightcache; hit; ttl=17; detail=not-found
//	flightcache; hit; ttl=-3; detail=stale
func CacheStatus(cache string, sv product.Served, notFound bool) string {
	var sb strings.Builder
	sb.WriteString(cache)
	detail := ""
	ttl := sv.TTLKnown
	switch sv.Outcome {
	case flightcache.OutcomeHitLocal:
		sb.WriteString("; hit")
	case flightcache.OutcomeHitShared:
		sb.WriteString("; hit")
		detail = "shared"
	case flightcache.OutcomeRefreshed:
		sb.WriteString("; hit")
		detail = "early-refresh"
	case flightcache.OutcomeNegativeHit:
		sb.WriteString("; hit")
		detail = "not-found"
	case flightcache.OutcomeStale:
		sb.WriteString("; hit")
		detail = "stale"
	case flightcache.OutcomeLoaded:
		sb.WriteString("; fwd=miss; stored")
	case flightcache.OutcomeCoalesced:
		sb.WriteString("; fwd=miss; collapsed")
	case flightcache.OutcomeLoadedWriteFailed:
		sb.WriteString("; fwd=miss")
		detail, ttl = "write-failed", false
	default: // OutcomeLoadFailed and anything new
		sb.WriteString("; fwd=miss")
		detail, ttl = "load-failed", false
		if notFound { // an uncached "not found" (naive mode)
			detail = "not-found"
		}
	}
	if notFound && detail == "" {
		detail = "not-found"
	}
	if ttl {
		sb.WriteString("; ttl=")
		sb.WriteString(strconv.FormatInt(ceilSeconds(sv.TTL), 10))
	}
	if detail != "" {
		sb.WriteString("; detail=")
		sb.WriteString(detail)
	}
	return sb.String()
}

func ceilSeconds(d time.Duration) int64 {
	return int64(math.Ceil(d.Seconds()))
}
