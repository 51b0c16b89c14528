package productd

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flightcache/flightcache/cmd/internal/httpapi"
)

// rawExchange sends req on a new connection to addr and reads the answer.
// The request is written while the answer is read: net/http answers a
// header too large before it has read the whole of it.
func rawExchange(t *testing.T, addr, req string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		io.WriteString(conn, req) // fails once the server has answered and closed
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	conn.Close()
	<-wrote
	return resp, string(body)
}

// Requests that net/http answers itself, before any handler (a header
// larger than the server takes: 431; a malformed request: 400), get
// productd's JSON error body like every other error, and the handlers'
// own answers are untouched.
func TestAnswersBeforeTheHandlerAreJSON(t *testing.T) {
	t.Parallel()
	cfg := Default()
	cfg.WriteToken = testWriteToken
	cfg.DB = filepath.Join(t.TempDir(), "products.db")
	cfg.Catalog = &testCatalog
	base, _ := startInProcess(t, cfg)
	addr := strings.TrimPrefix(base, "http://")

	huge := "GET /v1/tenants/acme/products/p-00001 HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", maxHeaderBytes+8192) + "\r\n\r\n"
	for _, tc := range []struct {
		name, req string
		status    int
		code      string
	}{
		{"header too large", huge, http.StatusRequestHeaderFieldsTooLarge, "header_too_large"},
		{"malformed header", "GET / HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", http.StatusBadRequest, "bad_request"},
		{"no Host", "GET /healthz HTTP/1.1\r\n\r\n", http.StatusBadRequest, "bad_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawExchange(t, addr, tc.req)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d; body %q", resp.StatusCode, tc.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q, want application/json; body %q", ct, body)
			}
			var e httpapi.ErrorBody
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code != tc.code || e.Error.Message == "" {
				t.Fatalf("body %q (%v), want a JSON error with code %q", body, err, tc.code)
			}
			if strings.Contains(body, "aaaa") {
				t.Fatalf("the answer echoes the request: %q", body)
			}
		})
	}

	// A handler's answers pass through unchanged: a 404 of the router and
	// a product.
	resp, body := rawExchange(t, addr, "GET /v1/tenants/acme/products/p-00001 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"productId":"p-00001"`) {
		t.Fatalf("GET a product: %d %q", resp.StatusCode, body)
	}
	resp, body = rawExchange(t, addr, "GET /no/such/route HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Date") == "" {
		t.Fatalf("GET /no/such/route: %d %v %q", resp.StatusCode, resp.Header, body)
	}
}
