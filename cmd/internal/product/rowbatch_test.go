package product

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
)

// heldStatements is a BatchRepository whose first GetMany waits for a
// release, so that the misses behind it queue in the service's Batcher; it
// hands every statement's selection to the test.
type heldStatements struct {
	BatchRepository
	statements chan Selection
	release    chan struct{}
	once       sync.Once
}

func (h *heldStatements) GetMany(ctx context.Context, sel Selection) (map[string]Product, error) {
	first := false
	h.once.Do(func() { first = true }) // before the test hears of the statement
	h.statements <- Selection{Tenant: sel.Tenant, Locale: sel.Locale, Currency: sel.Currency, IDs: slices.Clone(sel.IDs)}
	if first {
		<-h.release
	}
	return h.BatchRepository.GetMany(ctx, sel)
}

func (h *heldStatements) next(t *testing.T) Selection {
	t.Helper()
	select {
	case s := <-h.statements:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no statement reached the origin")
		return Selection{}
	}
}

// TestConcurrentMissesShareOneStatement: while a statement is at the
// origin, the misses of single Gets and of a batch read of the same
// selection queue in the row Batcher and go as one statement (here when
// MaxBatchIDs of them wait); another tenant's miss gets a statement of its
// own, at once. Over SQLite (IN (...)) and PostgreSQL (= ANY($4)).
func TestConcurrentMissesShareOneStatement(t *testing.T) {
	dialects(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		r := openRepo(t, dsn, Options{})
		if _, err := Migrate(ctx, r, &smallCatalog); err != nil {
			t.Fatal(err)
		}
		repo := &heldStatements{BatchRepository: r, statements: make(chan Selection, 16), release: make(chan struct{})}
		_, svc := newServices(t, repo)
		// Without MaxDelay, so that what queues behind the held statement
		// stays queued until MaxBatchIDs wait (MaxDelay has its own test).
		var err error
		if svc.rows, err = flightcache.NewBatcher(svc.loadRows, flightcache.BatcherOptions{MaxKeys: MaxBatchIDs, Partition: rowSelection}); err != nil {
			t.Fatal(err)
		}
		ref := func(tenant string, n int) Ref {
			return Ref{Tenant: tenant, ID: ProductID(n), Locale: "en-US", Currency: "USD"}
		}
		type answer struct {
			n   int
			p   Product
			err error
		}
		answers := make(chan answer, MaxBatchIDs+2)
		get := func(tenant string, n int) {
			go func() {
				sv, err := svc.Get(ctx, ref(tenant, n))
				answers <- answer{n, sv.Product, err}
			}()
		}
		get("acme", 1)
		if first := repo.next(t); !slices.Equal(first.IDs, []string{ProductID(1)}) {
			t.Fatalf("first statement %+v: a lone miss goes alone, at once", first)
		}
		get("globex", 2) // another selection: nothing of it at the origin, so it goes at once
		if other := repo.next(t); other.Tenant != "globex" || !slices.Equal(other.IDs, []string{ProductID(2)}) {
			t.Fatalf("second statement %+v, want globex's miss alone", other)
		}
		// 60 single misses and a batch read of 40 more: MaxBatchIDs keys
		// of one selection wait, and go at once as one statement.
		for n := 2; n < 62; n++ {
			get("acme", n)
		}
		batch := make(chan BatchServed, 1)
		go func() {
			sel := Selection{Tenant: "acme", Locale: "en-US", Currency: "USD"}
			for n := 62; n < 102; n++ {
				sel.IDs = append(sel.IDs, ProductID(n))
			}
			out, err := svc.GetMany(ctx, sel)
			if err != nil {
				t.Errorf("GetMany: %v", err)
			}
			batch <- out
		}()
		full := repo.next(t)
		if full.Tenant != "acme" || len(full.IDs) != MaxBatchIDs {
			t.Fatalf("third statement: tenant %s, %d ids; want acme's %d misses together", full.Tenant, len(full.IDs), MaxBatchIDs)
		}
		close(repo.release)
		for range 62 {
			a := <-answers
			switch {
			case a.n <= smallCatalog.ProductsPerTenant:
				if a.err != nil || a.p.ProductID != ProductID(a.n) {
					t.Fatalf("Get(%d) = %+v, %v", a.n, a.p, a.err)
				}
			case !errors.Is(a.err, ErrNotFound):
				t.Fatalf("Get(%d) of a missing row: %v", a.n, a.err)
			}
		}
		if out := <-batch; len(out.Missing) != 40 {
			t.Fatalf("batch read: %d missing, want 40 (the catalog has %d rows per tenant)", len(out.Missing), smallCatalog.ProductsPerTenant)
		}
		select {
		case s := <-repo.statements:
			t.Fatalf("an extra statement %+v", s)
		default:
		}
		// And they are cached: no statement for the same Gets again.
		if sv, err := svc.Get(ctx, ref("acme", 5)); err != nil || !sv.Outcome.Hit() {
			t.Fatalf("Get again: %v, %v", sv.Outcome, err)
		}
	})
}

// TestSingleGetKeepsItsTTLThroughTheBatcher: a single Get's entry records
// its jittered TTL, and a missing row is cached for NegativeTTL, as before
// rows were batched.
func TestSingleGetKeepsItsTTLThroughTheBatcher(t *testing.T) {
	_, svc := newServices(t, Count(NewMemoryRepository(smallCatalog), nil))
	ctx := context.Background()
	sv, err := svc.Get(ctx, Ref{Tenant: "acme", ID: ProductID(3), Locale: "en-US", Currency: "USD"})
	if err != nil || !sv.TTLKnown || sv.TTL <= 0 || sv.TTL > time.Minute {
		t.Fatalf("Get = TTL %v (known %v), %v", sv.TTL, sv.TTLKnown, err)
	}
	sv, err = svc.Get(ctx, Ref{Tenant: "acme", ID: "nope", Locale: "en-US", Currency: "USD"})
	if !errors.Is(err, ErrNotFound) || !sv.TTLKnown || sv.TTL != time.Second {
		t.Fatalf("missing row: TTL %v (known %v), %v", sv.TTL, sv.TTLKnown, err)
	}
}

// TestHeldStatementDoesNotHoldTheOtherMisses: a miss that queues behind a
// statement that does not return reaches the database on its own after
// rowBatchMaxDelay.
func TestHeldStatementDoesNotHoldTheOtherMisses(t *testing.T) {
	repo := &heldStatements{BatchRepository: Count(NewMemoryRepository(smallCatalog), nil), statements: make(chan Selection, 4), release: make(chan struct{})}
	_, svc := newServices(t, repo)
	ctx := context.Background()
	held := make(chan error, 1)
	go func() {
		_, err := svc.Get(ctx, Ref{Tenant: "acme", ID: ProductID(1), Locale: "en-US", Currency: "USD"})
		held <- err
	}()
	repo.next(t)
	sv, err := svc.Get(ctx, Ref{Tenant: "acme", ID: ProductID(2), Locale: "en-US", Currency: "USD"})
	if err != nil || sv.Product.ProductID != ProductID(2) {
		t.Fatalf("Get behind a held statement: %+v, %v", sv.Product, err)
	}
	if s := repo.next(t); !slices.Equal(s.IDs, []string{ProductID(2)}) {
		t.Fatalf("second statement %+v", s)
	}
	close(repo.release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
}
