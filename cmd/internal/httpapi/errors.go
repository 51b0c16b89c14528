package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/flightcache/flightcache/cmd/internal/product"
	"github.com/flightcache/flightcache/singleflight"
)

// ErrorBody is the JSON body of every error response:
// {"error":{"code":"…","message":"…"}}. Code is stable and meant for
// programs; Message is for people and never echoes request input.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of ErrorBody.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// apiError is an error response about to be written.
type apiError struct {
	status     int
	code       string
	message    string
	retryAfter time.Duration // > 0: send Retry-After
}

// classify maps an error from the service to its response. The order
// matters: a throttled or wrapped error is classified by its cause.
func classify(err error, retryAfter time.Duration) apiError {
	var inv *product.InvalidError
	var pe *singleflight.PanicError
	switch {
	case errors.As(err, &inv):
		return apiError{http.StatusBadRequest, "invalid_" + inv.Field, inv.Error(), 0}
	case errors.Is(err, product.ErrExists):
		return apiError{http.StatusConflict, "exists", "the product already exists for this tenant, locale and currency", 0}
	case errors.Is(err, product.ErrTenantLimit):
		return apiError{http.StatusForbidden, "tenant_limit", "no more tenants can be created through the API on this service (its cap on new tenants is reached)", 0}
	case errors.Is(err, product.ErrCreateLimit):
		return apiError{http.StatusForbidden, "create_limit", "no more products can be created in this tenant through the API (its cap on created products is reached)", 0}
	case errors.Is(err, product.ErrCategoryNotFound):
		return apiError{http.StatusNotFound, "category_not_found", "the tenant has no product in this category", 0}
	case errors.Is(err, product.ErrRepriceUnsupported):
		return apiError{http.StatusNotImplemented, "reprice_unsupported", "this service cannot reprice categories", 0}
	case errors.Is(err, product.ErrNotFound):
		return apiError{http.StatusNotFound, "not_found", "no such product for this tenant, locale and currency", 0}
	case errors.Is(err, singleflight.ErrTooManyInFlight), errors.Is(err, singleflight.ErrTooManyWaiters):
		return apiError{http.StatusServiceUnavailable, "overloaded", "too many requests in flight; retry later", retryAfter}
	case errors.Is(err, singleflight.ErrClosed):
		return apiError{http.StatusServiceUnavailable, "shutting_down", "the server is shutting down; retry on another instance", retryAfter}
	case errors.Is(err, product.ErrCacheUnavailable):
		// Before the deadline cases: a Redis call that timed out is the
		// cache's failure, not the origin's.
		return apiError{http.StatusServiceUnavailable, "cache_unavailable", "the shared cache is unavailable; nothing was stored; retry later", retryAfter}
	case errors.Is(err, product.ErrWritesBusy):
		return apiError{http.StatusServiceUnavailable, "writes_busy", "too many writes are waiting on the database; nothing was written; retry later", retryAfter}
	case errors.Is(err, product.ErrWriteTimeout):
		// Before the deadline case: the origin answers reads, it is the
		// write that waited too long (a locked table, say).
		return apiError{http.StatusGatewayTimeout, "write_timeout", "the database did not complete the write in time; " +
			"it was rolled back unless the deadline struck during its commit: read the product to see which", 0}
	case errors.As(err, &pe):
		return apiError{http.StatusInternalServerError, "internal", "internal error", 0}
	case errors.Is(err, context.DeadlineExceeded):
		return apiError{http.StatusGatewayTimeout, "origin_timeout", "the origin did not answer in time", 0}
	case errors.Is(err, context.Canceled):
		return apiError{http.StatusServiceUnavailable, "canceled", "the request was canceled", 0}
	default:
		return apiError{http.StatusBadGateway, "origin_error", "the origin failed", 0}
	}
}

// StatusClientClosedRequest is the status of a request whose client left
// (closed the connection, or reset the stream) before the answer was
// ready: nginx's 499, which no client reads. It is counted apart from the
// 5xx answers (a client that leaves is not the server failing) and from
// the 4xx ones (the request itself was fine).
const StatusClientClosedRequest = 499

// clientLeft reports whether err, what the service returned for r, is r's
// client leaving: r's context was cancelled (net/http cancels it when the
// client closes the connection or resets the stream; productd's server
// contexts are never cancelled otherwise) and err matches
// context.Canceled. A deadline productd sets itself is no departure: on a
// context derived from r's it ends that context only, whose error
// (context.DeadlineExceeded) does not match; on r's own context (a timeout
// middleware) r's context ends with context.DeadlineExceeded, not
// context.Canceled. Either stays a timeout (504). An HTTP client has no
// way to send its deadline: when it gives up, it closes the connection.
func clientLeft(r *http.Request, err error) bool {
	return errors.Is(r.Context().Err(), context.Canceled) && errors.Is(err, context.Canceled)
}

// fail answers a request that the service's err ended. A client that left
// gets 499, logged at debug level only: it is no failure of the server's,
// and a load it started goes on for the others. Any other error gets
// classify's answer, with a rate-limited warning, what, for a 5xx.
func (a *api) fail(w http.ResponseWriter, r *http.Request, what string, err error) {
	if clientLeft(r, err) {
		a.Logger.LogAttrs(r.Context(), slog.LevelDebug, "client closed the request",
			slog.String("request", what), slog.Int("status", StatusClientClosedRequest))
		writeError(w, apiError{status: StatusClientClosedRequest, code: "client_closed_request",
			message: "the client closed the request before the answer was ready"})
		return
	}
	e := classify(err, a.RetryAfter)
	if e.status >= 500 {
		a.failures.Log(r.Context(), slog.LevelWarn, what,
			slog.Int("status", e.status), slog.String("code", e.code), slog.Any("error", err))
	}
	writeError(w, e)
}

func writeError(w http.ResponseWriter, e apiError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(max(1, e.retryAfter.Round(time.Second)/time.Second))))
	}
	writeJSON(w, e.status, ErrorBody{Error: ErrorDetail{Code: e.code, Message: e.message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // only our own types are written; this is a bug
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// ErrUnauthorized is what an Options.AuthorizeWrite returns for a write
// without the right credentials: 401 with "WWW-Authenticate: Bearer".
var ErrUnauthorized = errors.New("httpapi: a write needs a valid bearer token")

// ErrWritesDisabled is what an Options.AuthorizeWrite returns when this
// instance takes no writes at all: 403.
var ErrWritesDisabled = errors.New("httpapi: writes are disabled on this instance")

// write wraps a handler of a route that changes data: it asks
// AuthorizeWrite first, before the body is read, and answers a refusal
// itself. The refusal never echoes what the request presented.
func (a *api) write(next http.HandlerFunc) http.HandlerFunc {
	if a.AuthorizeWrite == nil {
		return next
	}
	return func(w http.ResponseWriter, r *http.Request) {
		err := a.AuthorizeWrite(r)
		switch {
		case err == nil:
			next(w, r)
		case errors.Is(err, ErrWritesDisabled):
			writeError(w, apiError{status: http.StatusForbidden, code: "writes_disabled",
				message: "this instance takes no writes (it runs with writes disabled); send writes to one that does"})
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="productd"`)
			writeError(w, apiError{status: http.StatusUnauthorized, code: "unauthorized",
				message: `a write needs the write token, sent as the header "Authorization: Bearer" followed by a space and the token`})
		}
	}
}
