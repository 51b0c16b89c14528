// Package httpflight is a shared HTTP cache (RFC 9111) as net/http
// middleware, on a flightcache.Cache of stored responses: the requests
// that miss at once become one upstream request, on this instance or, with
// the Cache's Coordinator (package redislease), in the whole fleet that
// shares Redis. cmd/flightproxy is a caching reverse proxy on it.
//
//	layer, err := httpflight.New(httpflight.Options{Cache: responses})
//	...
//	http.ListenAndServe(":8080", layer.Wrap(app))
//
// # What is cached
//
// GET and HEAD requests (each under its own key), with the rules of a
// shared cache:
//
//   - freshness: s-maxage, max-age, Expires, else the heuristic of §4.2.2
//     (HeuristicFraction of the time since Last-Modified, at most
//     MaxHeuristic) for the heuristically cacheable status codes; Age is
//     computed as §4.2.3 says and sent with every response served from the
//     cache;
//   - never stored: no-store, private, a Vary of "*", a status other than
//     a final one (206 and 304 included), a body beyond Options.MaxBody,
//     a response to a request with Authorization unless it says public,
//     s-maxage or must-revalidate (§3.5), a response with Set-Cookie
//     (someone's session), and a response without explicit freshness whose
//     status no heuristic applies to, so that an error is cached only when
//     the upstream says it may be;
//   - validation: a stale response, or one marked no-cache, is validated
//     with its ETag (If-None-Match) and Last-Modified (If-Modified-Since);
//     a 304 refreshes the stored response. A client's own If-None-Match or
//     If-Modified-Since that matches the response it is served gets a 304;
//   - the request's no-cache (and Pragma: no-cache), max-age, min-fresh
//     and max-stale; its no-store, Range, If-Match, If-Unmodified-Since,
//     Upgrade (WebSocket) or a body send it upstream untouched;
//   - stale responses: stale-while-revalidate serves the stale response
//     and revalidates it in the background (once per key on an instance),
//     stale-if-error serves it when the validation fails or answers 5xx;
//     must-revalidate, proxy-revalidate and s-maxage forbid both (and
//     max-stale). The Cache's StaleFor and SoftTimeout keep serving a
//     response past its retention when the upstream fails or is slow;
//   - Vary: a request is served a stored response only when its values of
//     the fields the response's Vary names are the response's; other
//     variants are stored under secondary keys;
//   - unsafe methods (anything but GET, HEAD, OPTIONS and TRACE) are
//     forwarded, never collapsed, and a successful one (2xx, 3xx)
//     invalidates its target URI and the same-origin URIs of its Location
//     and Content-Location, in every tier and, with a Bus, on every
//     instance (§4.4);
//   - CDN-Cache-Control (RFC 9213), when a response has a valid one, in
//     place of its Cache-Control;
//   - Cache-Status (RFC 9211) on every response (package cachestatus).
//
// # Collapsing
//
// The requests for one key that miss together wait for one upstream
// request, the first one's. A waiter is handed that response only when a
// shared cache could serve it the stored response: when the response turns
// out not to be storable (private, no-store, Set-Cookie, too large, ...) or
// its Vary selects another variant, every waiter goes upstream on its own,
// at once (the other variant's waiters share a load of their own). When the
// shared request fails (an upstream 5xx that may not be stored, a failure
// of the handler), its waiters share one more upstream request before they
// are answered with an error, so one transient error is not handed to all
// of them. The Cache's MaxWaiters caps the waiters of a key (beyond: 503
// with Retry-After), Options.WaitTimeout bounds each wait (then 504).
// Stale responses are revalidated with the same collapsing: one
// conditional request per stored response, whose answer every waiter
// shares (an error included, unless stale-if-error lets the stale response
// stand in); a new response that may not be shared sends each waiter
// upstream itself.
//
// # Cache poisoning
//
// The key holds the method, the scheme and host (Host header), the path,
// the canonical query (parameters sorted by name) and the request header
// fields named in Options.KeyHeaders; Vary adds the fields the upstream
// names. A request header field that changes the response and is in
// neither is a poisoning vector: one client's header selects the response
// every other client gets. Key every field the upstream reads that is not
// in its Vary: typically X-Forwarded-Host, X-Forwarded-Proto,
// X-Forwarded-Prefix, X-Original-URL, X-Rewrite-URL and X-HTTP-Method-
// Override when the upstream honours them, and any header that selects a
// language, currency, tenant or format without a Vary. Or strip such
// fields before the Layer. Cookie and Authorization are not keyed: a
// response to them is personal, and is stored only when the upstream
// says so (public, s-maxage; Set-Cookie never).
package httpflight
