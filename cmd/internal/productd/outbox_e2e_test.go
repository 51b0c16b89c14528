package productd

import (
	"database/sql"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/testenv"
)

// The outbox flags of the test: a relay that reads every 100ms and takes
// a record half a second old.
const (
	outboxInterval = 100 * time.Millisecond
	outboxGrace    = 500 * time.Millisecond
)

// outboxBound is docs/productd.md's bound on how long after Redis returns
// every instance serves a PUT whose invalidation its writer could not
// make (Redis frozen) and never will (killed): an instance's bus comes up
// within a heartbeat and a publish (the relay's invalidation needs it, and
// the breaker lets it through), then the relay's next round, past its
// grace, invalidates the product everywhere and deletes the superseded
// entries from Redis, each call bounded by -redis-timeout.
func outboxBound() time.Duration {
	return faultHeartbeat + faultDownAfter + outboxInterval + outboxGrace + 4*faultRedisTimeout
}

// A writer killed (SIGKILL) just after a PUT made while Redis was frozen:
// the PUT committed, its invalidation reached neither Redis nor the other
// instance, and the writer's own redo dies with it. Redis comes back with
// the old row in it. Without the outbox, B would serve that row from
// Redis for the rest of its 5m TTL, and so would the restarted writer.
// With it, the relay of B makes the invalidation once Redis is back: B
// serves the update within outboxBound (plus slack for a busy machine),
// the restarted writer too, and the outbox ends empty.
func TestOutboxSurvivesAWriterKilledDuringARedisFreeze(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	dsn := testenv.PostgresDB(t)
	args := append(faultArgs(dsn, srv.Addr), "-outbox-interval", outboxInterval.String(), "-outbox-grace", outboxGrace.String())
	ps := startInstances(t, 2, args...)
	a, b := ps[0], ps[1]
	logsOnFailure(t, a, b)
	c := herdClient(4)
	defer c.CloseIdleConnections()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	v := busVariant
	old := makeHot(t, c, b, v, newMonotonic(t), 1) // in B's memory, and in Redis
	srv.Pause()
	rev, err := put(c, a, v, 424_242)
	if err != nil {
		t.Fatal(err)
	}
	if rev <= old.revision {
		t.Fatalf("the PUT committed revision %d, B held %d", rev, old.revision)
	}
	var pending int
	if err := db.QueryRow(`SELECT COUNT(*) FROM productd_outbox`).Scan(&pending); err != nil || pending != 1 {
		t.Fatalf("with Redis frozen the outbox holds %d records (%v), want the PUT's", pending, err)
	}
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.done
	a.cmd.Wait() //nolint:errcheck // killed on purpose
	srv.Resume()
	resumed := time.Now()

	// B, polled only now (a read during the freeze would load the new row
	// from the origin and fence the old one out: not what is tested).
	bound := outboxBound() + faultSlack
	var r servedRow
	lastStale := resumed
	for {
		started := time.Now()
		r = getRow(t, c, b.url+v.path())
		if r.revision >= rev {
			break
		}
		lastStale = started
		if time.Since(resumed) > bound+20*time.Second {
			t.Fatalf("B still serves revision %d (%s) %v after Redis returned; the PUT committed %d; B's outbox metrics:\n%s", r.revision, r.cache, time.Since(resumed), rev,
				metricLines(t, c, b.url, "productd_outbox"))
		}
	}
	took := lastStale.Sub(resumed)
	t.Logf("B's last GET that returned the older row started %v after Redis returned (bound %v + slack %v)", took, outboxBound(), faultSlack)
	if took > bound {
		t.Errorf("B served the older row %v after Redis returned, want at most %v", took, bound)
	}
	// The record goes once the relay's invalidation reached Redis (B
	// may have served the update sooner: its relay's first try, during
	// the freeze, already dropped the row from its own memory and fenced
	// it, before the publish failed).
	for pending := 1; pending > 0; {
		if err := db.QueryRow(`SELECT COUNT(*) FROM productd_outbox`).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if pending > 0 && time.Since(resumed) > bound+20*time.Second {
			t.Fatalf("the outbox still holds %d records %v after Redis returned; B's outbox metrics:\n%s", pending, time.Since(resumed),
				metricLines(t, c, b.url, "productd_outbox"))
		}
		time.Sleep(10 * time.Millisecond) // polling another process's commit
	}
	if cleared := time.Since(resumed); cleared > bound {
		t.Errorf("the relay cleared the outbox %v after Redis returned, want at most %v", cleared, bound)
	} else {
		t.Logf("the relay cleared the outbox %v after Redis returned", cleared)
	}
	// The relay counts a record once its delete has committed: just after
	// the outbox was seen empty, the count may still be on its way.
	got := metric(t, c, b.url, OutboxRelayedMetric)
	for deadline := time.Now().Add(10 * time.Second); got == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // polling another process's counter
		got = metric(t, c, b.url, OutboxRelayedMetric)
	}
	if got != 1 {
		t.Errorf("%s on B = %v, want the one relayed invalidation", OutboxRelayedMetric, got)
	}

	// The writer, restarted, reads the update.
	a2 := startProductd(t, args...)
	awaitBus(t, a2)
	if r := getRow(t, c, a2.url+v.path()); r.revision < rev {
		t.Fatalf("the restarted writer serves revision %d (%s), want %d", r.revision, r.cache, rev)
	}
}
