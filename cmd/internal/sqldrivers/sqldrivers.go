// Package sqldrivers registers the database/sql drivers that product.Open
// uses: pgx's database/sql adapter as "pgx" (PostgreSQL) and modernc's
// pure-Go SQLite as "sqlite".
//
// It has no API: a program or test that opens an origin imports it for its
// side effect,
//
//	import _ "github.com/flightcache/flightcache/cmd/internal/sqldrivers"
//
// The registration lives here rather than in package product so that the
// packages that use product only for its types and in-memory repository
// (the HTTP API and its fuzz targets among them) do not compile and link
// two database drivers, SQLite's C-to-Go translation above all.
package sqldrivers

import (
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	_ "modernc.org/sqlite"             // registers "sqlite"
)
