package flightcache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/coherence"
)

// loadLeased is loadChunk in cluster mode, with a Coordinator that claims
// many keys per round trip (driver.BatchCoordinator). todo are the keys
// the local double-check missed. The story, as a single key's coordinated
// for many keys at once:
//
//  1. The failure throttle, before anything is claimed.
//  2. Read-or-claim: one ClaimMany for every key, which also reads the
//     shared tier (the shared half of the double-check). A fresh entry
//     there is the key's result; one too old to serve is claimed again,
//     without reading, in a second ClaimMany for those keys only.
//  3. Keys whose lease this instance got are loaded together, in one
//     loader call, and ended together: one CompleteMany (the fenced
//     writes, the wake-ups of the followers on other instances, the
//     releases) for the loaded ones, one FailMany for the failed ones.
//     A refused write hands over the newer writer's entry, as for a
//     single key.
//  4. Keys another instance is loading (Busy) are waited for, each in
//     its own goroutine, by the single key's path (coordinated): the
//     wake-up, CoalesceWait, the take-over of an expired lease (the key
//     is then loaded alone, through the batch loader) are the same. Such
//     a goroutine owns the key's flight and ticket from then on.
//  5. A Coordinator that fails (the whole call, or one key) is handled
//     per OnCoordinatorFailure: under DegradeToLocal the key is loaded
//     with the leased ones but holds no lease, so it is written to the
//     local tier only. A batch that found the shared tier unavailable
//     asks no Coordinator, which lives on the same Redis.
func (c *Cache[V]) loadLeased(fctx context.Context, bc driver.BatchCoordinator, keys []*batchKey[V], names []string, tickets []coherence.Ticket,
	todo []int, load BatchLoadFunc[V], sharedDown sharedSkip, answers []batchAnswer[V], owned []bool, now time.Time) {
	if c.throttle != nil {
		kept := todo[:0]
		for _, j := range todo {
			if err := c.throttle.check(names[j], now); err != nil {
				if c.opts.Observer != nil {
					c.emit(fctx, driver.EventThrottled, driver.TierNone, err)
				}
				answers[j].err = err
				continue
			}
			kept = append(kept, j)
		}
		todo = kept
	}
	if len(todo) == 0 {
		return
	}
	leases := make([]driver.Lease, len(keys)) // by j; nil: no lease
	ended := make([]bool, len(keys))          // by j: leases[j] was ended
	// Every lease is ended, whatever happens below (a panic in a store or
	// the codec, from the grants' sorting on): the followers learn at
	// once, not when it expires, and no heartbeat keeps it alive.
	defer func() {
		var ls []driver.Lease
		var errs []error
		for j, l := range leases {
			if l != nil && !ended[j] {
				ls, errs = append(ls, l), append(errs, errLoaderAborted)
			}
		}
		if len(ls) > 0 {
			if err := bc.FailMany(context.WithoutCancel(fctx), ls, errs); err != nil {
				c.writeFailed(fctx, driver.TierShared, err)
			}
		}
	}()
	var unleased, busy []int
	coordFailed := func(j int, err error) {
		if c.opts.OnCoordinatorFailure == FailOnCoordinatorError {
			answers[j].err = fmt.Errorf("%w: %w", ErrCoordinatorUnavailable, err)
			return
		}
		unleased = append(unleased, j)
	}
	var coordErr error // the first failure, for the scope and the log
	if sharedDown != sharedUsable {
		coordErr = fmt.Errorf("flightcache: coordinator not asked, the shared tier is unavailable: %w", sharedDown.err())
		for _, j := range todo {
			coordFailed(j, coordErr)
		}
	} else {
		pending, read := todo, true
		for len(pending) > 0 {
			ask := make([]string, len(pending))
			for n, j := range pending {
				ask[n] = names[j]
			}
			grants, err := bc.ClaimMany(fctx, ask, read)
			if err == nil && len(grants) != len(ask) {
				err = fmt.Errorf("flightcache: ClaimMany returned %d grants for %d keys", len(grants), len(ask))
				for _, g := range grants { // unusable: let the leases go
					if g.Lease != nil {
						_, _ = g.Lease.Complete(context.WithoutCancel(fctx), nil)
					}
				}
			}
			if err != nil {
				if fctx.Err() != nil {
					for _, j := range pending {
						answers[j].err = err
					}
					break
				}
				coordErr = err
				for _, j := range pending {
					coordFailed(j, err)
				}
				break
			}
			var again []int
			for n, j := range pending {
				switch g := grants[n]; {
				case g.Lease != nil:
					leases[j] = g.Lease
					if c.opts.Observer != nil {
						c.emit(fctx, driver.EventLeaseAcquired, driver.TierShared, nil)
					}
				case g.Busy:
					busy = append(busy, j)
				case g.Err != nil && errors.Is(g.Err, ErrLeaderFailed):
					c.emitWoken(fctx, 0, g.Err)
					answers[j].err = g.Err
				case g.Err != nil:
					if coordErr == nil {
						coordErr = g.Err
					}
					coordFailed(j, g.Err)
				case g.Current != nil && read:
					if it := c.acceptShared(fctx, names[j], g.Current, now, tickets[j]); it != nil && now.Before(it.FreshUntil) {
						answers[j] = batchAnswer[V]{fl: &flight[V]{item: *it, found: true}}
						continue
					}
					again = append(again, j)
				case read:
					again = append(again, j) // an entry the store refused: claim without read
				default:
					coordFailed(j, errors.New("flightcache: ClaimMany granted nothing without read"))
				}
			}
			pending, read = again, false
		}
	}
	if coordErr != nil && c.opts.OnCoordinatorFailure == DegradeToLocal && len(unleased) > 0 {
		c.setScope(fctx, ScopeLocal, coordErr)
		if ok, suppressed := c.coordLog.allow(); ok {
			c.opts.Logger.LogAttrs(fctx, slog.LevelWarn, "flightcache: coordinator failed; keys of this batch are coalesced within the process only",
				slog.String("cache", c.opts.Name), slog.Any("error", coordErr), slog.Int("keys", len(unleased)), slog.Int64("suppressed", suppressed))
		}
	} else if coordErr == nil && sharedDown == sharedUsable {
		c.setScope(fctx, ScopeCluster, nil)
	}
	for _, j := range busy {
		owned[j] = true
		go c.followKey(keys[j], names[j], tickets[j], load)
	}

	// The keys to load: the leased ones and the degraded ones together.
	var toLoad []int
	for _, j := range todo {
		if leases[j] != nil {
			toLoad = append(toLoad, j)
		}
	}
	toLoad = append(toLoad, unleased...)
	if len(toLoad) == 0 {
		return
	}
	// From here on, the flight context of a key this goroutine loads, not
	// the chunk's first key's (loadChunk's fctx): that key may be followed
	// in its own goroutine, which completes its flight, and so ends its
	// context, as soon as its leader's value arrives; a load context made
	// from an ended flight context is ended from the start.
	fctx = keys[toLoad[0]].f.Context()
	loaded, flights, pol := c.originChunk(fctx, keys, owned, names, toLoad, load, answers)
	// The leases of keys that failed (the whole call, or one key): a
	// load whose every caller left did not fail, its lease is completed
	// with nothing stored so a follower may lead at once (see failLease).
	{
		var ls []driver.Lease
		var errs []error
		for _, j := range toLoad {
			if leases[j] != nil && answers[j].err != errBatchAborted && answers[j].err != nil {
				ls, errs = append(ls, leases[j]), append(errs, answers[j].err)
				ended[j] = true
			}
		}
		if len(ls) > 0 {
			var err error
			if errors.Is(fctx.Err(), context.Canceled) {
				_, cerrs := bc.CompleteMany(context.WithoutCancel(fctx), ls, make([]*driver.Entry, len(ls)))
				err = firstErr(cerrs)
			} else {
				err = bc.FailMany(context.WithoutCancel(fctx), ls, errs)
			}
			if err != nil {
				c.writeFailed(fctx, driver.TierShared, err)
			}
		}
	}
	if pol == nil {
		return
	}
	noStore := pol.noStore.Load()
	var (
		ls       []driver.Lease
		entries  []*driver.Entry
		leasedAt []int // index in loaded of ls[m]
		freeKeys []string
		freeTs   []coherence.Ticket
		freeFl   []*flight[V]
	)
	for n, j := range loaded {
		fl := flights[n]
		fl.noStore = noStore
		answers[j] = batchAnswer[V]{fl: fl}
		if leases[j] == nil {
			freeKeys, freeTs, freeFl = append(freeKeys, names[j]), append(freeTs, tickets[j]), append(freeFl, fl)
			continue
		}
		var e *driver.Entry
		if !noStore && c.coh.SharedWritable(coherence.Leased, false) {
			if enc, err := c.encodeSafely(&fl.item); err != nil {
				fl.writeErr = err
				c.writeFailed(fctx, driver.TierShared, err)
			} else {
				e = &enc
			}
		}
		ls, entries, leasedAt = append(ls, leases[j]), append(entries, e), append(leasedAt, n)
		ended[j] = true
	}
	if len(ls) > 0 {
		// Not the flight's context: the loader timeout may have just
		// ended it, and the followers must hear the results anyway. The
		// Coordinator bounds its own calls.
		done, errs := bc.CompleteMany(context.WithoutCancel(fctx), ls, entries)
		for m, n := range leasedAt {
			j, fl := loaded[n], flights[n]
			select {
			case <-ls[m].Lost():
				if c.opts.Observer != nil {
					c.emit(fctx, driver.EventLeaseLost, driver.TierShared, nil)
				}
			default:
			}
			var err error
			if errs != nil {
				err = errs[m]
			}
			switch {
			case err != nil:
				if fl.writeErr == nil {
					fl.writeErr = err
					c.writeFailed(fctx, driver.TierShared, err)
				}
			case entries[m] != nil && !done[m].Written:
				if c.opts.Observer != nil {
					c.emit(fctx, driver.EventFencedWriteRejected, driver.TierShared, nil)
				}
				// The newer writer's entry, through a shared read's checks
				// (read again when the Coordinator did not hand it back).
				mk := &miss[V]{c: c, key: names[j]}
				now := c.opts.Now()
				if it, ok := mk.recheck(context.WithoutCancel(fctx), now, tickets[j], done[m].Current, true); ok {
					answers[j] = batchAnswer[V]{fl: &flight[V]{item: it, found: true, remote: true, loadCtx: fl.loadCtx}}
					continue
				}
				mk.servedSuperseded(fctx, now, done[m].Current)
				fl.uncached = true // refused: stored in no tier
			case entries[m] != nil:
				c.fill(tickets[j], names[j], &fl.item, false)
			}
		}
	}
	if len(freeKeys) > 0 && !noStore {
		// Degraded keys hold no lease: the local tier only, and the
		// Outcome says the shared write did not happen.
		c.writeBackMany(fctx, freeKeys, freeTs, freeFl, sharedDown)
		for _, fl := range freeFl {
			if fl.writeErr == nil && !fl.uncached {
				fl.writeErr = errSkippedNoLease
			}
		}
	}
}

// followKey waits, for a batch, for the load of a key another instance
// holds the lease of: the single key's cluster path (coordinated), which
// may come to load the key itself (a lease taken over, CoalesceWait
// passed), then through load for that key alone. It owns bk's flight and
// ticket: it completes the one and ends the other.
func (c *Cache[V]) followKey(bk *batchKey[V], key string, t coherence.Ticket, load BatchLoadFunc[V]) {
	var (
		fl  *flight[V]
		err = errBatchAborted
	)
	defer func() {
		if p := recover(); p != nil {
			fl, err = nil, fmt.Errorf("flightcache: batch load panicked (%T)", p)
		}
		c.coh.End(key, t)
		bk.f.Complete(fl, err)
	}()
	m := &miss[V]{c: c, key: key, hasStale: bk.stale != nil, load: func(ctx context.Context) (V, error) {
		found, err := callBatchLoader(ctx, load, []string{key})
		v, ok := found[key]
		switch {
		case err != nil:
			var be *BatchError
			if errors.As(err, &be) && be.Keys != nil {
				if kerr := be.Keys[key]; kerr != nil {
					return v, kerr
				}
				if ok {
					return v, nil
				}
				return v, ErrNotFound
			}
			return v, err
		case !ok:
			return v, ErrNotFound
		}
		return v, nil
	}}
	fl, err = m.coordinated(bk.f.Context(), t)
}
