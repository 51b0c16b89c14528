package productd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache/cmd/internal/product"
)

// testCatalog is small enough to seed quickly under -race and holds every
// product these tests ask for.
var testCatalog = product.Catalog{
	Tenants:           []string{"acme", "initech"},
	ProductsPerTenant: 800,
	Locales:           []string{"en-US", "de-DE", "fr-FR"},
	Currencies:        []string{"USD", "EUR"},
}

// startInProcess runs a Server on a loopback port until the test ends.
func startInProcess(t *testing.T, cfg Config) (string, *Server) {
	t.Helper()
	s, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return serveInProcess(t, s), s
}

// serveInProcess serves s on a loopback port until the test ends and
// returns its base URL.
func serveInProcess(t testing.TB, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// A PUT that has returned is visible to every GET that starts after it,
// even while concurrent readers keep the entry hot and loads of the old
// value are in flight (the origin is slow, so they often are).
func TestNoStaleReadAfterPutReturned(t *testing.T) {
	t.Parallel()
	cfg := Default()
	cfg.WriteToken = testWriteToken
	cfg.DB = filepath.Join(t.TempDir(), "products.db")
	cfg.Catalog = &testCatalog
	cfg.OriginLatency = 3 * time.Millisecond
	cfg.TTL = time.Hour
	base, srv := startInProcess(t, cfg)
	target := base + "/v1/tenants/initech/products/p-00777?locale=de-DE&currency=EUR"
	c := herdClient(16)
	defer c.CloseIdleConnections()

	getPrice := func() (int64, error) {
		resp, err := c.Get(target)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("GET: status %d", resp.StatusCode)
		}
		var p struct{ PriceCents int64 }
		err = json.NewDecoder(resp.Body).Decode(&p)
		return p.PriceCents, err
	}

	// committed is the price of the last PUT that returned; prices only
	// grow, so a GET that started after it and reads less read stale data.
	var committed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stale atomic.Int64
	errs := make(chan error, 8)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				floor := committed.Load()
				got, err := getPrice()
				if err != nil {
					errs <- err
					return
				}
				if got < floor {
					stale.Add(1)
				}
			}
		}()
	}

	const iterations = 100
	for i := 1; i <= iterations; i++ {
		price := int64(1_000_000 + i)
		req, _ := http.NewRequest("PUT", target, strings.NewReader(fmt.Sprintf(`{"priceCents":%d}`, price)))
		authorize(req)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("PUT %d: status %d", i, resp.StatusCode)
		}
		committed.Store(price)
		got, err := getPrice()
		if err != nil {
			t.Fatal(err)
		}
		if got != price {
			t.Fatalf("iteration %d: GET after PUT returned price %d, want %d", i, got, price)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("reader: %v", err)
	}
	if n := stale.Load(); n > 0 {
		t.Fatalf("%d reads that started after a PUT returned saw an older price", n)
	}
	if q := srv.OriginQueries(); q < iterations {
		t.Fatalf("only %d origin queries for %d updates: the GETs after PUTs cannot all have reloaded", q, iterations)
	}
}
