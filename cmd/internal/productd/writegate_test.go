package productd

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache/cmd/internal/product"
	"github.com/flightcache/flightcache/internal/testenv"
)

// A stalled write must not take the read path down: with the outbox table
// locked (a LOCK, a VACUUM FULL, a migration), PUTs wait for it; they may
// hold only their share of the pool (-db-write-conns, a quarter by
// default), so a GET of a product nobody cached still gets a connection
// and answers, and each PUT answers a clear error within -write-timeout
// (default) instead of hanging until the server drops its connection. A
// PUT refused that way wrote nothing.
func TestStalledWritesLeaveTheReadsTheirConnections(t *testing.T) {
	t.Parallel()
	cfg := Default()
	cfg.WriteToken = testWriteToken
	cfg.DB = testenv.PostgresDB(t)
	cfg.Catalog = &testCatalog
	base, _ := startInProcess(t, cfg)

	// The lock, held in the test's own connection until the test says.
	db, err := sql.Open("pgx", cfg.DB)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `LOCK TABLE productd_outbox IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			if err := tx.Rollback(); err != nil {
				t.Errorf("release the lock: %v", err)
			}
		}
	}
	defer unlock()

	c := herdClient(64)
	defer c.CloseIdleConnections()
	const puts = 40
	type answer struct {
		status int
		code   string
		took   time.Duration
		err    error
	}
	answers := make([]answer, puts)
	var wg sync.WaitGroup
	for i := range puts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			req, _ := http.NewRequest(http.MethodPut, fmt.Sprintf("%s/v1/tenants/acme/products/%s?locale=en-US&currency=USD", base, product.ProductID(i+1)),
				strings.NewReader(`{"priceCents":4242}`))
			authorize(req)
			req.Header.Set("Content-Type", "application/json")
			resp, err := c.Do(req)
			a := answer{took: time.Since(start), err: err}
			if err == nil {
				var body struct{ Error struct{ Code string } }
				json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				a.status, a.code = resp.StatusCode, body.Error.Code
			}
			answers[i] = a
		}()
	}

	// The PUTs are stuck behind the lock once the database shows sessions
	// waiting for it (a quarter of the pool with the fix; the whole pool
	// without it).
	waiting := func() int {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	deadline := time.Now().Add(30 * time.Second)
	for waiting() < product.DefaultWriteConns(cfg.DBMaxConns) {
		if time.Now().After(deadline) {
			t.Fatal("no write waited for the locked outbox in 30s")
		}
		time.Sleep(10 * time.Millisecond) // polling the database's own view of its sessions
	}

	// Reads of products nobody cached go to the origin, which answers.
	for i := range 5 {
		resp, err := c.Get(fmt.Sprintf("%s/v1/tenants/initech/products/%s?locale=fr-FR&currency=EUR", base, product.ProductID(700+i)))
		if err != nil {
			t.Fatalf("GET of an uncached product while writes wait: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET of an uncached product while writes wait: %d, want 200 (the reads keep their connections)", resp.StatusCode)
		}
	}

	// Every PUT answers within -write-timeout and the slack of a busy host,
	// with a clear error; the lock is held until they have (or for 25s).
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(25 * time.Second):
	}
	unlock()
	<-done
	limit := cfg.WriteTimeout + 5*time.Second
	for i, a := range answers {
		switch {
		case a.err != nil:
			t.Errorf("PUT %d: no answer (%v) after %v", i, a.err, a.took)
		case a.took > limit:
			t.Errorf("PUT %d answered %d after %v, past -write-timeout %v and slack", i, a.status, a.took, cfg.WriteTimeout)
		case !(a.status == http.StatusServiceUnavailable && a.code == "writes_busy") && !(a.status == http.StatusGatewayTimeout && a.code == "write_timeout"):
			t.Errorf("PUT %d: %d %q, want 503 writes_busy or 504 write_timeout", i, a.status, a.code)
		}
	}
	// Refused writes wrote nothing: no revision moved, no outbox record.
	var revs, recs int
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(SUM(revision), 0) FROM products`).Scan(&revs); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM productd_outbox`).Scan(&recs); err != nil {
		t.Fatal(err)
	}
	if revs != 0 || recs != 0 {
		t.Errorf("after refused writes: revisions sum to %d and the outbox holds %d records, want nothing written", revs, recs)
	}
	// The lock gone, writes go through again.
	req, _ := http.NewRequest(http.MethodPut, base+"/v1/tenants/acme/products/p-00001?locale=en-US&currency=USD", strings.NewReader(`{"priceCents":4343}`))
	authorize(req)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("PUT after the lock: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT after the lock: %d, want 200", resp.StatusCode)
	}
}
