package product

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testenv"
)

// Two relays drain a large outbox together: every record's invalidation
// is made once, by one of them (they claim records instead of reading the
// same oldest ones), and the relays drain until the outbox is empty
// instead of taking one batch per round, so 1,000 records take one round,
// not ten.
func TestOutboxRelaysDrainALargeOutboxOnceEach(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	repo := openRepo(t, testenv.PostgresDB(t), Options{})
	if _, err := Migrate(ctx, repo, &smallCatalog); err != nil {
		t.Fatal(err)
	}
	const records = 1000
	if _, err := repo.DB().ExecContext(ctx, `INSERT INTO productd_outbox (tenant_id, product_id, locale, currency, revision, created_ms)
		SELECT 'acme', 'p-' || lpad(n::text, 5, '0'), 'en-US', 'USD', 1, $1 FROM generate_series(1, $2) AS n`,
		time.Now().Add(-time.Hour).UnixMilli(), records); err != nil {
		t.Fatal(err)
	}

	bus := &testBus{}
	var failed atomic.Int64
	a, b := newBusInstance(t, repo, bus.endpoint(), &failed), newBusInstance(t, repo, bus.endpoint(), &failed)
	var relayed atomic.Int64
	// Rounds of 5s: one batch per round would take 50s, a drain one round
	// and the work, which a loaded host stretches by seconds.
	opts := RelayOptions{Every: 5 * time.Second, Grace: time.Second, OnRelayed: func() { relayed.Add(1) }}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	start := time.Now()
	for _, s := range []*QueryService{a, b} {
		wg.Add(1)
		go func() { defer wg.Done(); s.RelayOutbox(rctx, opts) }()
	}
	// One round (5s) and the work of 1,000 invalidations, on a busy host:
	// one batch per round would take 10 rounds.
	const bound = 25 * time.Second
	for len(pendingRecords(t, repo)) > 0 && time.Since(start) < 60*time.Second {
		time.Sleep(10 * time.Millisecond) // polling the outbox
	}
	took := time.Since(start)
	stop()
	wg.Wait()
	if took >= bound {
		t.Errorf("two relays took %v or more to drain %d records (%d relayed), want under %v", took, records, relayed.Load(), bound)
	}
	t.Logf("%d records drained in %v", records, took)
	if n := relayed.Load(); n != records {
		t.Errorf("the relays reported %d invalidations for %d records, want each made once", n, records)
	}
	bus.mu.Lock()
	perPrefix := make(map[string]int) // per product tag
	for _, s := range bus.sent {
		if s.inv.Kind == driver.InvalidationTag && strings.HasPrefix(s.inv.Target, string(TagProduct)+":") {
			perPrefix[s.inv.Target]++
		}
	}
	bus.mu.Unlock()
	if len(perPrefix) != records {
		t.Errorf("the relays invalidated %d products, want %d", len(perPrefix), records)
	}
	for p, n := range perPrefix {
		if n != 1 {
			t.Errorf("product tag %q invalidated %d times, want once", p, n)
			break
		}
	}
	if f := failed.Load(); f != 0 {
		t.Errorf("%d failed invalidations", f)
	}
}

// The relays read the outbox oldest first through an index on the
// records' age: with 200,000 records a read does not sort the table.
func TestOutboxReadsItsOldestRecordsThroughAnIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	repo := openRepo(t, testenv.PostgresDB(t), Options{})
	if _, err := Migrate(ctx, repo, &smallCatalog); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	if _, err := repo.DB().ExecContext(ctx, `INSERT INTO productd_outbox (tenant_id, product_id, locale, currency, revision, created_ms)
		SELECT 'acme', 'p-' || lpad((n % 99999)::text, 5, '0'), 'en-US', 'USD', n, $1::bigint - n FROM generate_series(1, 200000) AS n`, now); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.DB().ExecContext(ctx, `ANALYZE productd_outbox`); err != nil {
		t.Fatal(err)
	}
	plan := func(q string, args ...any) string {
		rows, err := repo.DB().QueryContext(ctx, "EXPLAIN "+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var lines []string
		for rows.Next() {
			var l string
			if err := rows.Scan(&l); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, l)
		}
		return strings.Join(lines, "\n")
	}
	// The oldest records by age, as every relay asks for them.
	p := plan(`SELECT tenant_id, product_id, locale, currency, revision FROM productd_outbox
		WHERE created_ms < $1 ORDER BY created_ms LIMIT 100`, now-2000)
	if !strings.Contains(p, "Index Scan using productd_outbox_created") {
		t.Errorf("the oldest records are read without the age index:\n%s", p)
	}
	if strings.Contains(p, "Seq Scan") || strings.Contains(p, "Sort") {
		t.Errorf("reading the oldest records scans or sorts the table:\n%s", p)
	}
	// The claim itself (EXPLAIN does not run it).
	c := plan(repo.claimSQL(), now, now-2000, now-30_000, 100)
	if !strings.Contains(c, "Index Scan using productd_outbox_created") || strings.Contains(c, "Seq Scan on productd_outbox") {
		t.Errorf("the relays' claim reads the outbox without the age index:\n%s", c)
	}
	t.Logf("the oldest records:\n%s\nthe claim:\n%s", p, c)
}

// An outbox created by an older productd (no claim column, no age index)
// is brought to the current schema by Migrate, its records kept and
// claimable, once each.
func TestMigrateBringsAnOlderOutboxToClaims(t *testing.T) {
	dialects(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		r := openRepo(t, dsn, Options{})
		if _, err := r.DB().ExecContext(ctx, `CREATE TABLE productd_outbox (
			tenant_id TEXT NOT NULL, product_id TEXT NOT NULL, locale TEXT NOT NULL, currency TEXT NOT NULL,
			revision BIGINT NOT NULL, created_ms BIGINT NOT NULL,
			PRIMARY KEY (tenant_id, product_id, locale, currency, revision))`); err != nil {
			t.Fatal(err)
		}
		if _, err := r.DB().ExecContext(ctx, r.bind(`INSERT INTO productd_outbox VALUES (?, ?, ?, ?, ?, ?)`),
			"acme", ProductID(1), "en-US", "USD", 3, time.Now().Add(-time.Minute).UnixMilli()); err != nil {
			t.Fatal(err)
		}
		if _, err := Migrate(ctx, r, &smallCatalog); err != nil {
			t.Fatal(err)
		}
		recs, err := r.Claim(ctx, time.Now(), 10, time.Minute)
		if err != nil || len(recs) != 1 || recs[0].Revision != 3 {
			t.Fatalf("Claim after migrating = %+v, %v; want the old record", recs, err)
		}
		if again, err := r.Claim(ctx, time.Now(), 10, time.Minute); err != nil || len(again) != 0 {
			t.Fatalf("a second Claim = %+v, %v; want nothing (the record is claimed)", again, err)
		}
		if err := r.Release(ctx, recs...); err != nil {
			t.Fatal(err)
		}
		if again, err := r.Claim(ctx, time.Now(), 10, time.Minute); err != nil || len(again) != 1 {
			t.Fatalf("Claim after Release = %+v, %v; want the record again", again, err)
		}
	})
}
