package product

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// CreateWith holds its caps under concurrent creates from many
// connections (as from many instances): of 12 creates in 12 new tenants
// at once, exactly MaxNewTenants succeed; a tenant takes MaxCreatesPerTenant
// rows, seeded tenants included; a refused create never calls Before and
// stores nothing; a failing Before stores nothing either.
func TestCreateWithHoldsItsCapsUnderConcurrentCreates(t *testing.T) {
	dialects(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		r := openRepo(t, dsn, Options{})
		if _, err := Migrate(ctx, r, &smallCatalog); err != nil {
			t.Fatal(err)
		}
		var before atomic.Int64
		o := CreateOptions{Limits: CreateLimits{MaxNewTenants: 3, MaxCreatesPerTenant: 2},
			Before: func(context.Context) error { before.Add(1); return nil }}
		d := Draft{DisplayName: "Kettle", PriceCents: 4200}
		create := func(tenant, id string, o CreateOptions) error {
			ref, err := NewRef(tenant, id, "en-US", "USD")
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.CreateWith(ctx, ref, d, o)
			return err
		}
		var wg sync.WaitGroup
		var ok, limited atomic.Int64
		for i := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch err := create(fmt.Sprintf("new-%d", i), "x-1", o); {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, ErrTenantLimit):
					limited.Add(1)
				default:
					t.Errorf("create in new-%d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		if ok.Load() != 3 || limited.Load() != 9 || before.Load() != 3 {
			t.Fatalf("12 concurrent creates in new tenants: %d created, %d refused, Before called %d times; want 3, 9, 3", ok.Load(), limited.Load(), before.Load())
		}
		tenant := smallCatalog.Tenants[0]
		for i, want := range []error{nil, nil, ErrCreateLimit} {
			if err := create(tenant, fmt.Sprintf("y-%d", i), o); !errors.Is(err, want) && !(want == nil && err == nil) {
				t.Fatalf("create %d in the seeded tenant %s: %v, want %v", i+1, tenant, err, want)
			}
		}
		boom := errors.New("redis said no")
		fail := CreateOptions{Limits: o.Limits, Before: func(context.Context) error { return boom }}
		if err := create(smallCatalog.Tenants[1], "z-1", fail); !errors.Is(err, boom) {
			t.Fatalf("create whose Before fails: %v, want its error", err)
		}
		var rows, counted int
		if err := r.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM products WHERE product_id IN ('x-1', 'y-0', 'y-1', 'y-2', 'z-1')`).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if err := r.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM productd_creates`).Scan(&counted); err != nil {
			t.Fatal(err)
		}
		if rows != 3+2 || counted != 3+1 {
			t.Fatalf("%d created rows and %d counted tenants, want 5 and 4", rows, counted)
		}
	})
}
