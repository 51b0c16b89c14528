package httpapi

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flightcache/flightcache/cmd/internal/product"
)

// TestPackageLinksNoDatabaseDriver keeps the HTTP API, and so its fuzz
// targets' instrumented builds, free of the database drivers (SQLite's
// C-to-Go translation above all), and checks that product.Open says what
// to import in a program that registered none.
func TestPackageLinksNoDatabaseDriver(t *testing.T) {
	if d := sql.Drivers(); len(d) != 0 {
		t.Fatalf("the httpapi test binary registers database drivers %v: something imports %s", d, product.DriversPackage)
	}
	for _, dsn := range []string{filepath.Join(t.TempDir(), "origin.db"), "postgres://postgres@127.0.0.1:5432/test"} {
		_, err := product.Open(context.Background(), dsn, product.Options{})
		if !errors.Is(err, product.ErrNoDriver) {
			t.Fatalf("Open(%q) without drivers: %v, want ErrNoDriver", dsn, err)
		}
		if !strings.Contains(err.Error(), product.DriversPackage) {
			t.Errorf("Open(%q): %q does not name %s", dsn, err, product.DriversPackage)
		}
	}
}
