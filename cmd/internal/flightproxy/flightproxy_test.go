package flightproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache/cmd/internal/testleak"
	"github.com/flightcache/flightcache/internal/testenv"
)

func TestMain(m *testing.M) { testleak.Main(m, nil) }

func TestFlagsAreValidatedWithClearErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{nil, "-upstream"},
		{[]string{"-upstream", "ftp://x"}, "-upstream"},
		{[]string{"-upstream", "http://"}, "-upstream"},
		{[]string{"-upstream", "http://u", "-listen", "nonsense"}, "-listen"},
		{[]string{"-upstream", "http://u", "-redis", "mysql://x"}, "-redis"},
		{[]string{"-upstream", "http://u", "-max-body", "0"}, "-max-body"},
		{[]string{"-upstream", "http://u", "-max-entries", "0"}, "-max-entries"},
		{[]string{"-upstream", "http://u", "-max-waiters", "-1"}, "-max-waiters"},
		{[]string{"-upstream", "http://u", "-wait-timeout", "0s"}, "-wait-timeout"},
		{[]string{"-upstream", "http://u", "-upstream-timeout", "1h"}, "-upstream-timeout"},
		{[]string{"-upstream", "http://u", "-redis-timeout", "0s"}, "-redis-timeout"},
		{[]string{"-upstream", "http://u", "-redis-timeout", "1m"}, "-redis-timeout"},
		{[]string{"-upstream", "http://u", "stray"}, "arguments"},
	} {
		_, err := ParseFlags(tc.args, io.Discard)
		var fe *FlagError
		if !errors.As(err, &fe) || fe.Flag != tc.flag {
			t.Errorf("%q: %v, want a *FlagError on %s", tc.args, err, tc.flag)
		}
	}
	cfg, err := ParseFlags([]string{"-upstream", "http://127.0.0.1:9000", "-key-headers", "X-Forwarded-Host, X-Tenant"}, io.Discard)
	if err != nil || cfg.Upstream.Host != "127.0.0.1:9000" || len(cfg.KeyHeaders) != 2 || cfg.KeyHeaders[1] != "X-Tenant" {
		t.Fatalf("valid flags: %+v, %v", cfg, err)
	}
}

func config(t *testing.T, upstream string, extra ...string) Config {
	t.Helper()
	cfg, err := ParseFlags(append([]string{"-upstream", upstream}, extra...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// New that fails part-way (here: -redis names an address where nothing
// listens) returns its error and releases what it had built, without
// panicking on the way out.
func TestNewThatFailsReturnsItsErrorWithoutPanicking(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := New(ctx, config(t, "http://127.0.0.1:1", "-redis", "redis://"+addr+"/0"), quietLog())
	if err == nil {
		p.Close()
		t.Fatal("New succeeded against a Redis address where nothing listens")
	}
	if p != nil {
		t.Fatalf("New returned a Proxy (%v) with its error %v", p, err)
	}
	if !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("error %q does not say that Redis does not answer", err)
	}
}

// The proxy caches, passes through what it may not store, and invalidates
// on POST, through a real httputil.ReverseProxy and a real upstream.
func TestProxyCachesThroughTheReverseProxy(t *testing.T) {
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Cache-Control", "max-age=60")
			fmt.Fprint(w, strings.Repeat("b", 5000))
		default:
			w.Header().Set("Cache-Control", "max-age=60")
			fmt.Fprintf(w, "%s %s #%d", r.Method, r.URL.RequestURI(), n)
		}
	}))
	defer up.Close()
	p, err := New(context.Background(), config(t, up.URL, "-max-body", "1000"), quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	front := httptest.NewServer(p.Handler)
	defer front.Close()
	defer front.Client().CloseIdleConnections()

	get := func(path string) (string, string) {
		resp, err := front.Client().Get(front.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), resp.Header.Get("Cache-Status")
	}
	if b, _ := get("/a?q=1"); b != "GET /a?q=1 #1" {
		t.Fatalf("first: %q", b)
	}
	if b, cs := get("/a?q=1"); b != "GET /a?q=1 #1" || !strings.HasPrefix(cs, "flightproxy; hit") {
		t.Fatalf("second: %q, Cache-Status %q", b, cs)
	}
	if b, _ := get("/big"); len(b) != 5000 {
		t.Fatalf("a body beyond -max-body came back with %d bytes", len(b))
	}
	resp, err := front.Client().Post(front.URL+"/a", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if b, _ := get("/a?q=1"); strings.HasSuffix(b, "#1") {
		t.Fatalf("the POST did not invalidate /a?q=1: %q", b)
	}
}

// Run shuts down gracefully when its context ends: a request in progress
// is answered, then Run returns.
func TestRunShutsDownGracefully(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		fmt.Fprint(w, "done")
	}))
	defer up.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- Serve(ctx, config(t, up.URL), ln, quietLog()) }()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	var resp *http.Response
	got := make(chan error, 1)
	go func() {
		var err error
		resp, err = client.Get("http://" + addr + "/slow") // the listener accepts already
		got <- err
	}()
	<-entered
	cancel()
	close(release)
	if err := <-got; err != nil {
		t.Fatalf("the request in progress failed: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "done" {
		t.Fatalf("the request in progress got %q", b)
	}
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Cluster mode: three proxies sharing the real Redis (a prefix of their
// own) collapse a herd spread over all three into one upstream request.
func TestThreeProxiesOnRedisSendOneUpstreamRequestPerHerd(t *testing.T) {
	addr := testenv.RequireRedis(t)
	const perProxy = 20
	var calls atomic.Int64
	var arrived atomic.Int64
	gate := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			<-gate
		}
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("ETag", `"v1"`)
		fmt.Fprint(w, "the one response")
	}))
	defer up.Close()
	prefix := testenv.UniqueName("flightproxy-test:")
	var fronts []*httptest.Server
	for range 3 {
		// A Claim past -redis-timeout sends its proxy to the upstream on
		// its own, as it should; the bound leaves a loaded host room.
		p, err := New(context.Background(), config(t, up.URL, "-redis", "redis://"+addr+"/0", "-redis-prefix", prefix, "-redis-timeout", "5s"), quietLog())
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		h := p.Handler
		f := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrived.Add(1)
			h.ServeHTTP(w, r)
		}))
		defer f.Close()
		defer f.Client().CloseIdleConnections()
		fronts = append(fronts, f)
	}
	type answer struct {
		body, status string
		proxy        int
	}
	answers := make(chan answer, 3*perProxy)
	var wg sync.WaitGroup
	for i, f := range fronts {
		for range perProxy {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// One Host for the fleet, as behind a load balancer: the
				// host is in the key.
				req, _ := http.NewRequest(http.MethodGet, f.URL+"/hot?id=7", nil)
				req.Host = "shop.example"
				resp, err := f.Client().Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				answers <- answer{string(b), resp.Header.Get("Cache-Status"), i}
			}()
		}
	}
	// Every request has reached a proxy while the upstream holds the
	// first: each of the others waits for it, on its proxy or through
	// Redis.
	deadline := time.Now().Add(20 * time.Second)
	for arrived.Load() < 3*perProxy || calls.Load() < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests arrived, %d upstream calls", arrived.Load(), calls.Load())
		}
		time.Sleep(time.Millisecond)
	}
	close(gate)
	wg.Wait()
	close(answers)
	loaded := map[int]bool{} // proxies whose request loaded and stored the response
	var statuses []string
	for a := range answers {
		statuses = append(statuses, fmt.Sprintf("proxy %d: %s", a.proxy, a.status))
		if a.body != "the one response" {
			t.Errorf("proxy %d answered %q (%s)", a.proxy, a.body, a.status)
		}
		if strings.Contains(a.status, "stored") {
			loaded[a.proxy] = true
		}
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("%d upstream requests for a herd of %d over 3 proxies, want 1; Cache-Status:\n%s", got, 3*perProxy, strings.Join(statuses, "\n"))
	}
	// The two proxies that did not lead waited for the leader through
	// Redis (detail=coalesced-cluster), or, on a host slow enough that
	// their flight began after the load ended, read its entry there
	// (collapsed, no detail): neither stored a response of its own.
	if len(loaded) != 1 {
		t.Fatalf("proxies %v stored a response they loaded; want only the one that led; Cache-Status:\n%s", loaded, strings.Join(statuses, "\n"))
	}
}
