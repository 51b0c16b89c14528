package httpflight

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/cachestatus"
	"github.com/flightcache/flightcache/key"
)

// load sends r upstream (through next) on the loader's context lctx,
// without r's own validators, with stale's when validating it, and
// returns the response to store: stored for its freshness plus what it may
// be served stale for, or not stored at all (Response.unshared says why).
// A server error that may not be stored is returned as an *upstreamError,
// so that the Cache serves what it kept instead, where allowed.
func (l *Layer) load(lctx context.Context, r *http.Request, next http.Handler, stale *Response) (*Response, error) {
	req := r.Clone(lctx)
	req.Header.Del("If-None-Match")
	req.Header.Del("If-Modified-Since")
	if stale != nil {
		if etag := stale.Header.Get("ETag"); etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		if lm := stale.Header.Get("Last-Modified"); lm != "" {
			req.Header.Set("If-Modified-Since", lm)
		}
	}
	rec := &recorder{header: http.Header{}, max: l.opts.MaxBody}
	requestTime := l.opts.Now()
	if err := rec.serve(next, req); err != nil {
		return nil, err
	}
	resp := &Response{StatusCode: rec.status, Header: rec.final, Body: rec.body.Bytes(), RequestTime: requestTime, ResponseTime: l.opts.Now(), truncated: rec.overflow}
	if stale != nil && resp.StatusCode == http.StatusNotModified {
		resp = stale.refreshed(rec.final, requestTime, resp.ResponseTime)
		resp.validated = true
	}
	resp.Variant = variant(resp.facts().vary, r)
	if resp.unshared = l.notStorable(r, resp); resp.unshared != "" {
		flightcache.NoStore(lctx)
		if resp.StatusCode >= 500 && !resp.truncated {
			return nil, &upstreamError{resp}
		}
		return resp, nil
	}
	flightcache.SetTTL(lctx, l.retention(resp))
	return resp, nil
}

// notStorable says why a shared cache may not store resp, the response to
// r (RFC 9111 §3, §3.5), or "". Beyond the RFC, a response that sets a
// cookie is never stored: it is someone's session.
func (l *Layer) notStorable(r *http.Request, resp *Response) string {
	f := resp.facts()
	cc, lifetime, heuristic := f.cc, f.lifetime, f.heuristic
	switch {
	case resp.truncated:
		return "too-large"
	case resp.StatusCode < 200 || resp.StatusCode == http.StatusPartialContent || resp.StatusCode == http.StatusNotModified:
		return "status"
	case cc.has("no-store"):
		return "no-store"
	case cc.has("private"):
		return "private"
	case len(resp.Header.Values("Set-Cookie")) > 0:
		return "set-cookie"
	case f.varyStar:
		return "vary-star"
	case r.Header.Get("Authorization") != "" && !cc.has("public") && !cc.has("s-maxage") && !cc.has("must-revalidate"):
		return "authorization"
	case heuristic && !heuristicStatus[resp.StatusCode] && !cc.has("public"):
		return "uncacheable" // no explicit freshness, and a status no heuristic applies to
	case lifetime <= resp.currentAge(l.opts.Now()) && !f.hasValidator && !cc.has("stale-while-revalidate") && !cc.has("stale-if-error"):
		return "uncacheable" // stale at once, and nothing to validate it with
	}
	return ""
}

// retention is how long the Cache keeps resp: its remaining freshness,
// then as long as it may be served stale (stale-while-revalidate,
// stale-if-error) or, with a validator, KeepStale.
func (l *Layer) retention(resp *Response) time.Duration {
	f := resp.facts()
	cc, lifetime := f.cc, f.lifetime
	keep := time.Duration(0)
	if f.hasValidator {
		keep = l.opts.KeepStale
	}
	for _, d := range []string{"stale-while-revalidate", "stale-if-error"} {
		if v, ok := cc.seconds(d); ok {
			keep = max(keep, v)
		}
	}
	remaining := max(lifetime-resp.currentAge(l.opts.Now()), 0)
	return max(min(remaining+keep, flightcache.MaxTTL), flightcache.MinTTL)
}

// recorder is the ResponseWriter of a load: it keeps the status, the
// header as it was when the status was written, and the body up to max
// bytes; beyond, it keeps nothing more and fails the write.
type recorder struct {
	header   http.Header
	final    http.Header
	status   int
	body     bytes.Buffer
	max      int64
	overflow bool
}

var errBodyTooLarge = errors.New("httpflight: response body exceeds MaxBody")

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(code int) {
	if rec.status != 0 || code < 200 {
		return // informational responses are not stored
	}
	rec.status = code
	rec.final = rec.header.Clone()
}

func (rec *recorder) Write(p []byte) (int, error) {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	if rec.overflow {
		return 0, errBodyTooLarge
	}
	if int64(rec.body.Len()+len(p)) > rec.max {
		rec.overflow = true
		rec.body = bytes.Buffer{}
		return 0, errBodyTooLarge
	}
	return rec.body.Write(p)
}

// serve runs next on req. A handler that aborts (http.ErrAbortHandler, as
// httputil.ReverseProxy does when the body cannot be copied, which
// includes a body beyond max) leaves a truncated response, or an error
// when nothing was written.
func (rec *recorder) serve(next http.Handler, req *http.Request) (err error) {
	defer func() {
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler {
				panic(p)
			}
			if rec.status == 0 {
				err = &upstreamError{&Response{StatusCode: http.StatusBadGateway, Header: http.Header{}, Body: []byte("bad gateway\n")}}
				return
			}
			rec.overflow = true
		}
	}()
	next.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	return nil
}

// write serves s to the client: a stored response with its Age, a 304
// when the client's validators match it, and the Cache-Status entry.
func (l *Layer) write(w http.ResponseWriter, r *http.Request, s served) {
	resp := s.resp
	h := w.Header()
	for name, values := range resp.Header {
		h[name] = slices.Clip(values) // an append by the caller copies
	}
	if s.fromCache {
		h.Set("Age", strconv.FormatInt(int64(resp.currentAge(l.opts.Now())/time.Second), 10))
	}
	status := resp.StatusCode
	if status == http.StatusOK && notModified(r, resp.Header) {
		status = http.StatusNotModified
		for _, name := range []string{"Content-Length", "Content-Type", "Content-Encoding", "Content-Range", "Transfer-Encoding"} {
			h.Del(name)
		}
	}
	s.status.Cache = l.opts.Name
	h["Cache-Status"] = append(slices.Clip(resp.Header["Cache-Status"]), s.status.String())
	w.WriteHeader(status)
	if status != http.StatusNotModified && r.Method != http.MethodHead {
		_, _ = w.Write(resp.Body)
	}
}

// notModified evaluates the client's If-None-Match, else its
// If-Modified-Since, against a stored 200 (RFC 9110 §13.2.2).
func notModified(r *http.Request, h http.Header) bool {
	if inm := r.Header.Values("If-None-Match"); len(inm) > 0 {
		etag := strings.TrimPrefix(h.Get("ETag"), "W/")
		if etag == "" {
			return false
		}
		for _, field := range inm {
			for _, tag := range strings.Split(field, ",") {
				tag = strings.TrimSpace(tag)
				if tag == "*" || strings.TrimPrefix(tag, "W/") == etag {
					return true
				}
			}
		}
		return false
	}
	ims, err := parseHTTPDate(r.Header.Get("If-Modified-Since"))
	if err != nil {
		return false
	}
	lm, err := parseHTTPDate(h.Get("Last-Modified"))
	if err != nil {
		return false
	}
	return !lm.After(ims)
}

// forward sends r upstream on its own, streaming, with its Cache-Status
// entry.
func (l *Layer) forward(w http.ResponseWriter, r *http.Request, next http.Handler, st cachestatus.Entry) {
	st.Cache = l.opts.Name
	w.Header().Add("Cache-Status", st.String())
	next.ServeHTTP(w, r)
}

// unsafe forwards a request of an unsafe method, never collapsed, and
// invalidates what a successful one may have changed (RFC 9111 §4.4): the
// target URI and the same-origin URIs of its Location and Content-Location,
// every method and variant of each. It invalidates when the status is
// written, before the client can see it, and again once the handler has
// returned, so that a load that read the upstream meanwhile is not kept.
func (l *Layer) unsafe(w http.ResponseWriter, r *http.Request, next http.Handler) {
	st := cachestatus.Entry{Cache: l.opts.Name, Fwd: cachestatus.FwdMethod}
	w.Header().Add("Cache-Status", st.String())
	iw := &invalidatingWriter{ResponseWriter: w, l: l, r: r}
	next.ServeHTTP(iw, r)
	if iw.status >= 200 && iw.status < 400 {
		l.invalidate(r, iw.location)
	}
}

// invalidatingWriter invalidates when a successful status is written.
type invalidatingWriter struct {
	http.ResponseWriter
	l        *Layer
	r        *http.Request
	status   int
	location []string
}

func (iw *invalidatingWriter) WriteHeader(code int) {
	if iw.status == 0 && code >= 200 {
		iw.status = code
		h := iw.ResponseWriter.Header()
		iw.location = []string{h.Get("Location"), h.Get("Content-Location")}
		if code < 400 {
			iw.l.invalidate(iw.r, iw.location)
		}
	}
	iw.ResponseWriter.WriteHeader(code)
}

func (iw *invalidatingWriter) Write(p []byte) (int, error) {
	if iw.status == 0 {
		iw.WriteHeader(http.StatusOK)
	}
	return iw.ResponseWriter.Write(p)
}

// Unwrap gives http.ResponseController the client's writer.
func (iw *invalidatingWriter) Unwrap() http.ResponseWriter { return iw.ResponseWriter }

// Flush flushes the client's writer when it can.
func (iw *invalidatingWriter) Flush() {
	if iw.status == 0 {
		iw.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(iw.ResponseWriter).Flush()
}

// invalidate drops every stored response of r's target and of the
// same-origin URIs in also (RFC 9111 §4.4).
func (l *Layer) invalidate(r *http.Request, also []string) {
	o := origin(r)
	targets := []*url.URL{r.URL}
	for _, ref := range also {
		if ref == "" {
			continue
		}
		u, err := r.URL.Parse(ref)
		if err != nil {
			continue
		}
		if u.Host != "" && !strings.EqualFold(u.Scheme+"://"+u.Host, o) {
			continue // another origin: a denial of service if honoured
		}
		targets = append(targets, u)
	}
	for _, u := range targets {
		if err := l.invalidateURL(r.Context(), l.resourceBuilder(o, u)); err != nil {
			l.opts.Logger.Warn("httpflight: invalidation failed", "err", err)
		}
	}
}

func (l *Layer) invalidateURL(ctx context.Context, b key.Builder) error {
	p, err := b.Prefix()
	if err != nil {
		return err
	}
	return l.opts.Cache.InvalidatePrefix(context.WithoutCancel(ctx), p)
}
