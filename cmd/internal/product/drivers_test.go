package product

// The tests open SQLite and PostgreSQL origins.
import _ "github.com/flightcache/flightcache/cmd/internal/sqldrivers"
