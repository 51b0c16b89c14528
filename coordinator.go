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

// WaitPolicy is what a follower does when Options.CoalesceWait passes
// while another instance still holds the lease.
type WaitPolicy uint8

// The wait policies.
const (
	// WaitStaleOrLoad, the default: serve the stale value if there is one,
	// else load without caching the result (the behaviour of nginx's
	// proxy_cache_lock_timeout): the caller gets an answer, and the slow
	// leader's write, when it comes, is not raced.
	WaitStaleOrLoad WaitPolicy = iota
	// WaitFail: return an error matching ErrCoalesceTimeout.
	WaitFail
)

// FailurePolicy is what a Cache does when its Coordinator cannot be
// reached at run time.
type FailurePolicy uint8

// The failure policies.
const (
	// DegradeToLocal, the default: coalesce within the process only until
	// the Coordinator answers again, loudly (an EventScopeChanged and a
	// rate-limited warning). Every flight still asks the Coordinator first,
	// so cluster scope comes back by itself.
	DegradeToLocal FailurePolicy = iota
	// FailOnCoordinatorError: the Get fails with an error matching
	// ErrCoordinatorUnavailable.
	FailOnCoordinatorError
)

// Errors of cluster mode.
var (
	// ErrLeaderFailed is matched by the error of a Get whose key's load
	// failed on another instance, just now or within the failure window.
	ErrLeaderFailed = errors.New("flightcache: the load failed on the instance that led it")
	// ErrCoalesceTimeout is matched by the error of a Get that waited
	// Options.CoalesceWait for another instance's load, under WaitFail.
	ErrCoalesceTimeout = errors.New("flightcache: timed out waiting for another instance's load")
	// ErrCoordinatorUnavailable is matched by the error of a Get that could
	// not reach the Coordinator, under FailOnCoordinatorError.
	ErrCoordinatorUnavailable = errors.New("flightcache: coordinator unavailable")
)

// Scope returns the scope the Cache coalesces in right now: ScopeCluster
// with a Coordinator that answers, ScopeLocal without one or while
// degraded (see DegradeToLocal).
func (c *Cache[V]) Scope() Scope {
	return Scope(c.scope.Load())
}

// setScope records the scope and reports a change.
func (c *Cache[V]) setScope(ctx context.Context, s Scope, why error) {
	if Scope(c.scope.Swap(uint32(s))) == s {
		return
	}
	if c.opts.Observer != nil {
		c.observe(driver.Event{Kind: driver.EventScopeChanged, Ctx: ctx, Cache: c.opts.Name, Scope: s, Err: why})
	}
	if s == ScopeLocal {
		c.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "flightcache: coordinator unreachable; coalescing within this process only",
			slog.String("cache", c.opts.Name), slog.Any("error", why))
	} else {
		c.opts.Logger.LogAttrs(ctx, slog.LevelInfo, "flightcache: coordinator reachable again; coalescing across the cluster",
			slog.String("cache", c.opts.Name))
	}
}

// coordinated is the flight's cluster layer, run by miss.run after the
// double-check of the local tier missed. The story, per instance (the
// engine already made this the only flight of the key in the process):
//
//  1. Read-or-claim. The first Claim also reads the shared tier in the same
//     step (driver.ClaimRequest.Read): the shared half of the flight's
//     double-check, without a round trip of its own. A fresh value there
//     is the result; a value too old to serve (stale, or not newer than
//     the one an early refresh replaces) means Claim again, without
//     reading. A Coordinator that does not read leaves this to the Cache:
//     it reads the tier itself once it holds the lease (see readAfterClaim).
//     When the Get left its own shared read to the flight
//     (miss.readInFlight: the Coordinator asked for it, see claimReader),
//     that first Claim is a look (lookShared): a
//     shared call that does not wait, whose fresh entry is the Get's
//     shared hit and whose stale one its fallback; another instance's
//     lease sends the flight on to an ordinary Claim, which waits.
//  2. The Coordinator either hands this instance the lease (it leads:
//     load, fenced write, broadcast, release; see lead), or waits for the
//     instance that holds it.
//  3. A follower woken by a completion gets the value the leader stored in
//     the same step (or reads the shared tier again). A fresh value is the
//     result (ScopeCluster). None (the leader stored nothing, or its write
//     was fenced and the newer writer's value is gone already) means
//     Claim again, past that completion: this instance may now lead.
//  4. A leader's failure is every follower's error at once (the
//     Coordinator also remembers it for a short window, so a retry storm
//     stays off the origin).
//  5. A lease that expires without a result is taken over inside Claim by
//     exactly one waiting instance, with a higher token; the old leader's
//     write, should it come back, is then refused by the fence.
//  6. A follower that waits CoalesceWait gives up per OnCoalesceTimeout; a
//     Coordinator that fails is handled per OnCoordinatorFailure. A Get
//     that already found the shared tier unavailable (timeout, open
//     breaker) does not ask the Coordinator, which lives on the same
//     Redis: it pays at most one shared timeout, as without cluster mode.
func (m *miss[V]) coordinated(ctx context.Context, t coherence.Ticket) (fl *flight[V], err error) {
	c := m.c
	if m.sharedDown != sharedUsable {
		return m.coordinatorFailed(ctx, t, fmt.Errorf("flightcache: coordinator not asked, the shared tier is unavailable: %w", m.sharedDown.err()))
	}
	// stale is a stale entry the flight's first look found (lookShared):
	// the callers' fallback should the flight end in an error.
	var stale *driver.Item[V]
	defer func() {
		if stale != nil && err != nil {
			if fl == nil {
				fl = new(flight[V])
			}
			fl.stale = stale
		}
	}()
	var after uint64
	read := true // the first Claim reads the shared tier (read-or-claim)
	look := m.readInFlight
	deadline := time.Now().Add(c.opts.CoalesceWait)
	for {
		wait := time.Until(deadline)
		if wait <= 0 {
			return m.waitTimedOut(ctx, t, ErrCoalesceTimeout)
		}
		var cl driver.Grant
		looked := look
		if look {
			// The Get's shared read, folded into the first Claim.
			look = false
			var held bool
			cl, held, err = m.lookShared(ctx)
			switch {
			case m.sharedDown != sharedUsable:
				return m.coordinatorFailed(ctx, t, fmt.Errorf("flightcache: read-or-claim failed, the shared tier is unavailable: %w", err))
			case held:
				// Another instance loads the key: wait for it.
				if c.opts.Observer != nil {
					c.emit(ctx, driver.EventMiss, driver.TierShared, nil)
				}
				continue
			}
		} else {
			// Bounded as the flight's hard timeout budgets it (see New):
			// the wait, and one shared call's time to answer.
			cctx, cancel := context.WithTimeout(ctx, wait+c.opts.SharedTimeout)
			cl, err = c.opts.Coordinator.Claim(cctx, m.key, driver.ClaimRequest{After: after, Wait: wait, Read: read})
			cancel()
		}
		if err == nil && cl.Read && !c.claimReadsSaid && !c.claimReads.Load() {
			c.claimReads.Store(true)
		}
		switch {
		case err == nil:
			c.setScope(ctx, ScopeCluster, nil)
		case errors.Is(err, ErrLeaderFailed):
			c.setScope(ctx, ScopeCluster, nil)
			c.emitWoken(ctx, cl.Waited, err)
			return nil, err
		case errors.Is(err, ErrCoalesceTimeout):
			c.emitWoken(ctx, cl.Waited, err)
			return m.waitTimedOut(ctx, t, err)
		case ctx.Err() != nil:
			return nil, err
		default:
			return m.coordinatorFailed(ctx, t, err)
		}
		if looked && cl.Lease == nil && cl.Read && cl.Current != nil {
			// The look found an entry and took no lease: the shared hit
			// the read before the flight would have served, or its stale
			// fallback.
			now := c.opts.Now()
			if it := c.acceptShared(ctx, m.key, cl.Current, now, t); it != nil {
				if now.Before(it.FreshUntil) {
					return &flight[V]{item: *it, found: true, sharedHit: true}, nil
				}
				if !it.NotFound {
					stale, m.hasStale = it, true
				}
			}
			if c.opts.Observer != nil {
				c.emit(ctx, driver.EventMiss, driver.TierShared, nil)
			}
			after, read = cl.Done, false
			continue
		}
		if looked && c.opts.Observer != nil {
			c.emit(ctx, driver.EventMiss, driver.TierShared, nil)
		}
		if cl.Lease != nil {
			if c.opts.Observer != nil {
				kind := driver.EventLeaseAcquired
				if cl.Lease.TakenOver() {
					kind = driver.EventLeaseTakenOver
				}
				c.emit(ctx, kind, driver.TierShared, nil)
			}
			if read && !cl.Read && !m.forced { // asked to read-or-claim, and it did not read
				if fl, ok := m.readAfterClaim(ctx, t, cl.Lease); ok {
					return fl, nil
				}
			}
			return m.lead(ctx, t, cl.Lease)
		}
		if (cl.Done == 0 && cl.Read) || (cl.Done != 0 && cl.Waited == 0) {
			// Read-or-claim found a value and took no lease, or a load
			// that had ended before this Claim began (driver.Grant.Waited):
			// either way a read of the shared tier, not a wake-up. A
			// Refresh serves no such read: it notes what it replaces and
			// claims again, to load.
			if m.forced {
				if cl.Current != nil {
					held := c.fromWall(cl.Current.Meta)
					m.replaces(&held)
				}
				after, read = cl.Done, false
				continue
			}
			if it, ok := m.recheck(ctx, c.opts.Now(), t, cl.Current, cl.Done != 0 && !cl.Read); ok {
				return &flight[V]{item: it, found: true}, nil
			}
			after, read = cl.Done, false
			continue
		}
		c.emitWoken(ctx, cl.Waited, nil)
		if it, ok := m.recheck(ctx, c.opts.Now(), t, cl.Current, !cl.Read); ok {
			return &flight[V]{item: it, found: true, remote: true}, nil
		}
		after, read = cl.Done, false
	}
}

// lookShared is the flight's first Claim when its caller left the shared
// read to it (miss.readInFlight): read-or-claim, looking once without
// waiting (ClaimRequest.Wait 0), as a shared call (see sharedCall): under
// the SharedBreaker and SharedTimeout, as the read it replaces. held
// reports that another instance holds the key's lease (the Claim's
// ErrCoalesceTimeout): an answer of the tier, not a failure, as
// ErrLeaderFailed is. A failure sets m.sharedDown when it makes the tier
// unavailable for this Get.
func (m *miss[V]) lookShared(ctx context.Context) (cl driver.Grant, held bool, err error) {
	c := m.c
	var answer error
	err = c.sharedCall(ctx, true, func(ctx context.Context) error {
		var err error
		cl, err = c.opts.Coordinator.Claim(ctx, m.key, driver.ClaimRequest{Read: true})
		if errors.Is(err, ErrLeaderFailed) || errors.Is(err, ErrCoalesceTimeout) {
			answer = err
			return nil
		}
		return err
	})
	if err != nil {
		if ctx.Err() == nil { // the caller leaving is not a store failure
			c.readFailed(ctx, err)
		}
		m.sharedDown = unavailable(ctx, err)
		return cl, false, err
	}
	if errors.Is(answer, ErrCoalesceTimeout) {
		return cl, true, nil
	}
	return cl, false, answer
}

// readAfterClaim is the shared half of the double-check for a Coordinator
// that did not read the tier in the flight's first Claim (a later Claim
// follows an answer that already showed the tier): with the lease held, it reads
// the tier; a fresh value there (another instance filled the key since
// this one missed) is the result, and the lease is completed with nothing
// stored, which wakes the key's followers to read that value too.
func (m *miss[V]) readAfterClaim(ctx context.Context, t coherence.Ticket, lease driver.Lease) (*flight[V], bool) {
	it, ok := m.recheck(ctx, m.c.opts.Now(), t, nil, true)
	if !ok {
		return nil, false
	}
	if _, err := lease.Complete(context.WithoutCancel(ctx), nil); err != nil {
		m.c.writeFailed(ctx, driver.TierShared, err)
	}
	return &flight[V]{item: it, found: true}, true
}

func (c *Cache[V]) emitWoken(ctx context.Context, waited time.Duration, err error) {
	if c.opts.Observer != nil {
		c.observe(driver.Event{Kind: driver.EventFollowerWoken, Ctx: ctx, Cache: c.opts.Name, Tier: driver.TierShared, Duration: waited, Err: err})
	}
}

// lead loads the key under lease and ends the lease on every path: a
// failed load fails it, a panicking loader or codec too (the engine turns
// the panic into the callers' error afterwards); completeLease sets ended
// just before it hands the lease its result.
func (m *miss[V]) lead(ctx context.Context, t coherence.Ticket, lease driver.Lease) (*flight[V], error) {
	ended := false
	defer func() {
		if !ended {
			m.failLease(ctx, lease, errLoaderAborted)
		}
	}()
	fl, pol, err := m.loadOrigin(ctx)
	if err != nil {
		ended = true
		m.failLease(ctx, lease, err)
		return fl, err
	}
	fl.noStore = pol.noStore.Load()
	fl = m.completeLease(ctx, t, lease, fl, fl.noStore, &ended)
	if m.newerThan != 0 {
		m.c.refreshDone(m)
	}
	return fl, nil
}

// loadWithoutLease is the flight without the cluster layer: the load, and
// the write-back when store is set (and the loader did not say NoStore).
func (m *miss[V]) loadWithoutLease(ctx context.Context, t coherence.Ticket, store bool) (*flight[V], error) {
	fl, pol, err := m.loadOrigin(ctx)
	if err != nil {
		return fl, err
	}
	if fl.noStore = pol.noStore.Load(); store && !fl.noStore {
		fl.writeErr = m.writeBack(ctx, t, fl)
	}
	fl.uncached = fl.uncached || !store
	if m.newerThan != 0 {
		m.c.refreshDone(m)
	}
	return fl, nil
}

// waitTimedOut applies OnCoalesceTimeout. A stale value is served by the
// caller (settle) on the error; loading here, with nothing to serve, skips
// the lease and the write: the leader is still at work, and its fenced
// write is the one that should land. An early refresh or a Refresh never
// loads here: the value it refreshes is still fresh, and the lease holder
// stores the new one; a load it could not store would be an origin call
// for nothing.
func (m *miss[V]) waitTimedOut(ctx context.Context, t coherence.Ticket, err error) (*flight[V], error) {
	if m.c.opts.OnCoalesceTimeout == WaitFail || m.hasStale || m.newerThan != 0 || m.forced {
		return nil, err
	}
	return m.loadWithoutLease(ctx, t, false)
}

// coordinatorFailed applies OnCoordinatorFailure to a Claim that failed.
func (m *miss[V]) coordinatorFailed(ctx context.Context, t coherence.Ticket, err error) (*flight[V], error) {
	c := m.c
	if c.opts.OnCoordinatorFailure == FailOnCoordinatorError {
		return nil, fmt.Errorf("%w: %w", ErrCoordinatorUnavailable, err)
	}
	c.setScope(ctx, ScopeLocal, err)
	if ok, suppressed := c.coordLog.allow(); ok {
		c.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "flightcache: coordinator failed; this load is coalesced within the process only",
			slog.String("cache", c.opts.Name), slog.Any("error", err), slog.Int64("suppressed", suppressed))
	}
	return m.loadWithoutLease(ctx, t, true)
}

// completeLease ends a successful load under a lease: the fenced write,
// the broadcast and the release, in the Lease's Complete. The local tier
// gets the value only if the shared write was not refused: a refused write
// means a newer load, Set or Delete superseded this one, and the flight
// then hands its callers what that newer writer stored, when it is there
// (the Lease's Completion carries it, read in the same step as the
// refusal, or the shared tier is read again).
// A load that finishes after Close stores nothing (the lease is still
// completed, so the followers lead at once), and neither does one whose
// value the codec cannot encode, even by panicking. It sets *ended just
// before Complete.
func (m *miss[V]) completeLease(ctx context.Context, t coherence.Ticket, lease driver.Lease, fl *flight[V], noStore bool, ended *bool) *flight[V] {
	c := m.c
	var e *driver.Entry
	if !noStore && c.coh.SharedWritable(coherence.Leased, false) {
		if enc, err := c.encodeSafely(&fl.item); err != nil {
			fl.writeErr = err
			c.writeFailed(ctx, driver.TierShared, err)
		} else {
			e = &enc
		}
	}
	// Not the flight's context: the loader timeout may have just ended it,
	// and the followers must hear the result anyway. The Coordinator
	// bounds its own calls.
	*ended = true
	done, err := lease.Complete(context.WithoutCancel(ctx), e)
	select {
	case <-lease.Lost():
		if c.opts.Observer != nil {
			c.emit(ctx, driver.EventLeaseLost, driver.TierShared, nil)
		}
	default:
	}
	switch {
	case err != nil:
		fl.writeErr = err
		c.writeFailed(ctx, driver.TierShared, err)
	case e != nil && !done.Written:
		if c.opts.Observer != nil {
			c.emit(ctx, driver.EventFencedWriteRejected, driver.TierShared, nil)
		}
		// The entry that refused the write, when the Coordinator read it
		// in the same step (done.Current), goes through the checks of a
		// shared read; else the tier is read again. Not the flight's
		// context either: a leader that stalled past its loader timeout
		// (paused, swapped out) is exactly the one whose write is
		// refused, and its callers still wait for the newer value. The
		// shared read bounds itself (SharedTimeout).
		now := c.opts.Now()
		if it, ok := m.recheck(context.WithoutCancel(ctx), now, t, done.Current, true); ok {
			return &flight[V]{item: it, found: true, remote: true, loadCtx: fl.loadCtx}
		}
		m.servedSuperseded(ctx, now, done.Current)
		fl.uncached = true // refused: stored in no tier
		return fl
	}
	if e != nil {
		c.fill(t, m.key, &fl.item, false)
	}
	return fl
}

// servedSuperseded warns that a load whose fenced write was refused
// serves its own value: the newer writer's could not be served (cur is the
// entry the Coordinator handed back, nil for none). It says why, from the
// checks a shared read makes, so that an operator (or a failing test) can
// tell a missing entry from one this instance judged older or expired.
func (m *miss[V]) servedSuperseded(ctx context.Context, now time.Time, cur *driver.Entry) {
	c := m.c
	ok, suppressed := c.coordLog.allow()
	if !ok {
		return
	}
	attrs := []slog.Attr{slog.String("cache", c.opts.Name), slog.Bool("newer_entry_handed_back", cur != nil), slog.Int64("suppressed", suppressed)}
	if cur != nil {
		wall := time.Now()
		local := c.fromWall(cur.Meta)
		attrs = append(attrs,
			slog.String("judgement", c.coh.AcceptShared(m.key, copyOf(&local, time.Time{}), now, c.opts.ClockSkew).String()),
			slog.Bool("read_time_known", !local.Version.IsZero()),
			slog.Duration("read_before_now", wall.Sub(local.Version)),
			slog.Duration("fresh_for", local.FreshUntil.Sub(now)),
			slog.Duration("stale_for", local.StaleUntil.Sub(now)),
			slog.Duration("cache_clock_behind", wall.Sub(now)),
			slog.Bool("bus_down", c.coh.Down()))
	}
	c.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "flightcache: a newer write refused this load's, and its value could not be served; this load's own value is served", attrs...)
}

// failLease ends a failed load under a lease. A load whose context was
// cancelled (every caller left, or the Cache closed) did not fail: the
// lease is completed with nothing stored, which wakes the followers to
// look again and lets one of them lead at once, instead of failing them
// all. That is decided on the context's state, not on err: an origin's
// own error may wrap context.Canceled (a driver's cancelled statement) and
// is a failure like any other.
func (m *miss[V]) failLease(ctx context.Context, lease driver.Lease, err error) {
	var ferr error
	if errors.Is(ctx.Err(), context.Canceled) {
		_, ferr = lease.Complete(context.WithoutCancel(ctx), nil)
	} else {
		ferr = lease.Fail(context.WithoutCancel(ctx), err)
	}
	if ferr != nil {
		// The followers find out when the lease expires instead.
		m.c.writeFailed(ctx, driver.TierShared, ferr)
	}
}
