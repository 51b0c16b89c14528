package product

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Writes hold a pooled connection for as long as the database makes them
// wait: a locked outbox table (a LOCK, a VACUUM FULL, a migration) would
// let them take every connection, and every read that misses the cache
// would then wait for one until its own timeout, on a table that reads
// perfectly well. So writes are gated: at most Options.WriteConns of them
// hold a connection at once, the rest of the pool is the reads', and each
// write (its wait for a slot included) has Options.WriteTimeout to finish.

// DefaultWriteTimeout is Options.WriteTimeout's default.
const DefaultWriteTimeout = 5 * time.Second

// ErrWritesBusy is returned by a write that found every write slot taken
// (Options.WriteConns) for its whole WriteTimeout: nothing was written.
var ErrWritesBusy = errors.New("product: every write slot stayed busy for the write timeout; nothing was written")

// ErrWriteTimeout is matched by the error of a write that held a slot but
// did not finish within Options.WriteTimeout. The transaction was rolled
// back unless the deadline struck during its commit, when the database
// may have applied it: read the row to know.
var ErrWriteTimeout = errors.New("product: the write did not finish within the write timeout")

// DefaultWriteConns is Options.WriteConns' default for a pool of maxConns
// connections: a quarter of it, at least 1.
func DefaultWriteConns(maxConns int) int { return max(1, maxConns/4) }

// errWriteDeadline is the cause of a write's own deadline, told apart
// from the caller's.
var errWriteDeadline = errors.New("product: write deadline")

// write runs fn, a write's database work, under a write slot and the
// write deadline. The deadline covers the wait for the slot too: a write
// that got none in time returns ErrWritesBusy, one that ran out of time
// holding one an error matching ErrWriteTimeout (and fn's error). The
// caller's own end (a client that left) is returned as it is.
func (r *SQLRepository) write(ctx context.Context, fn func(ctx context.Context) error) error {
	wctx, cancel := context.WithTimeoutCause(ctx, r.writeTimeout, errWriteDeadline)
	defer cancel()
	select {
	case r.writeSlots <- struct{}{}:
	case <-wctx.Done():
		if errors.Is(context.Cause(wctx), errWriteDeadline) {
			return ErrWritesBusy
		}
		return context.Cause(wctx)
	}
	defer func() { <-r.writeSlots }()
	err := fn(wctx)
	if err != nil && ctx.Err() == nil && pastOwnDeadline(ctx, wctx) {
		return fmt.Errorf("%w (%v): %w", ErrWriteTimeout, r.writeTimeout, err)
	}
	return err
}

// pastOwnDeadline reports whether wctx, made by write from ctx, reached
// its own deadline (not one it inherited from ctx). A driver may fail on
// the deadline before the context's timer marks wctx done (a socket
// deadline set to it), and then with any error (a query cancelled by the
// server, a connection closed): so the clock decides too.
func pastOwnDeadline(ctx, wctx context.Context) bool {
	if errors.Is(context.Cause(wctx), errWriteDeadline) {
		return true
	}
	own, _ := wctx.Deadline()
	if parent, ok := ctx.Deadline(); ok && !own.Before(parent) {
		return false
	}
	return !time.Now().Before(own)
}
