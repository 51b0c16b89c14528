package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/flightcache/flightcache/cmd/internal/product"
)

// A client that leaves while its product's load runs gets 499 (which it
// never reads) and a debug line, not a 5xx and a warning; the load goes on
// and serves the next request without asking the origin again.
func TestClientThatLeavesMidLoadGets499NotAWarning(t *testing.T) {
	var logs bytes.Buffer // written by the request goroutine only, read after it ended
	a := newTestAPI(t, apiConfig{logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	release := make(chan struct{})
	a.repo.get = func(ctx context.Context, ref product.Ref, next func() (product.Product, error)) (product.Product, error) {
		<-release
		return next()
	}
	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		w := httptest.NewRecorder()
		a.h.ServeHTTP(w, httptest.NewRequestWithContext(ctx, "GET", p1, nil))
		done <- w
	}()
	<-a.events.started
	leave()
	w := <-done
	wantError(t, w, StatusClientClosedRequest, "client_closed_request")
	if cs := w.Header().Get("Cache-Status"); cs != "flightcache; detail=client-left" {
		t.Errorf("Cache-Status %q, want flightcache; detail=client-left", cs)
	}
	if strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "level=DEBUG msg=\"client closed the request\"") {
		t.Errorf("logs: want one debug line and no warning, got:\n%s", logs.String())
	}

	close(release)
	if w := a.do("GET", p1, ""); w.Code != http.StatusOK {
		t.Fatalf("the next request: status %d, want 200; body %s", w.Code, w.Body)
	}
	if n := a.counted.Queries(); n != 1 {
		t.Errorf("origin queries = %d, want 1: the departed client's load serves the next request", n)
	}
}

// stubService answers every call with do's error; do runs on the
// request's context.
type stubService struct {
	do func(ctx context.Context) error
}

func (s stubService) call(ctx context.Context) error { return s.do(ctx) }

func (s stubService) Get(ctx context.Context, _ product.Ref) (product.Served, error) {
	return product.Served{}, s.call(ctx)
}

func (s stubService) Update(ctx context.Context, _ product.Ref, _ product.Patch) (product.Product, error) {
	return product.Product{}, s.call(ctx)
}

func (s stubService) GetMany(ctx context.Context, _ product.Selection) (product.BatchServed, error) {
	return product.BatchServed{}, s.call(ctx)
}

// Every route answers a client that left with 499, and only then: a
// deadline the server set itself (on a context derived from the
// request's) is a 504 timeout with a warning, also when the client left
// afterwards, and a context.Canceled that is not the client's leaving stays
// a server error.
func TestOnlyTheClientsOwnLeavingIs499(t *testing.T) {
	serverDeadline := func(ctx context.Context, leave func()) error {
		dctx, cancel := context.WithTimeout(ctx, 0)
		defer cancel()
		<-dctx.Done()
		err := fmt.Errorf("query products: %w", dctx.Err())
		leave() // the client leaves after the deadline, or not (a no-op)
		return err
	}
	routes := []struct{ method, target, body string }{
		{"GET", p1, ""},
		{"PUT", p1, `{"priceCents":100}`},
		{"GET", "/v1/tenants/acme/products?ids=p-00001", ""},
	}
	for _, tc := range []struct {
		name       string
		do         func(ctx context.Context, leave func()) error
		clientGone bool // the client left before the request reached the service
		timedOut   bool // the request's own context ends with a deadline first (a timeout middleware's)
		status     int
		code       string
		warn       bool
	}{
		{"client left", func(ctx context.Context, _ func()) error { <-ctx.Done(); return ctx.Err() }, true, false, StatusClientClosedRequest, "client_closed_request", false},
		{"client left, error wrapped", func(ctx context.Context, _ func()) error { return fmt.Errorf("commit: %w", ctx.Err()) }, true, false, StatusClientClosedRequest, "client_closed_request", false},
		{"server deadline", func(ctx context.Context, _ func()) error { return serverDeadline(ctx, func() {}) }, false, false, http.StatusGatewayTimeout, "origin_timeout", true},
		{"server deadline, then the client left", serverDeadline, false, false, http.StatusGatewayTimeout, "origin_timeout", true},
		{"a canceled of the origin's own", func(context.Context, func()) error { return context.Canceled }, false, false, http.StatusServiceUnavailable, "canceled", true},
		{"server deadline on the request's own context", func(ctx context.Context, _ func()) error { <-ctx.Done(); return ctx.Err() }, false, true, http.StatusGatewayTimeout, "origin_timeout", true},
	} {
		for _, rt := range routes {
			t.Run(tc.name+" "+rt.method+" "+rt.target, func(t *testing.T) {
				var logs bytes.Buffer
				ctx, leave := context.WithCancel(context.Background())
				defer leave()
				if tc.timedOut {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, 0)
					defer cancel()
				}
				svc := stubService{do: func(ctx context.Context) error { return tc.do(ctx, leave) }}
				h := New(Options{Service: svc, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
				if tc.clientGone {
					leave()
				}
				var body *strings.Reader
				if rt.body != "" {
					body = strings.NewReader(rt.body)
				}
				req := httptest.NewRequestWithContext(ctx, rt.method, rt.target, nil)
				if body != nil {
					req = httptest.NewRequestWithContext(ctx, rt.method, rt.target, body)
					req.Header.Set("Content-Type", "application/json")
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				wantError(t, w, tc.status, tc.code)
				if warned := strings.Contains(logs.String(), "level=WARN"); warned != tc.warn {
					t.Errorf("a warning logged: %v, want %v:\n%s", warned, tc.warn, logs.String())
				}
			})
		}
	}
}
