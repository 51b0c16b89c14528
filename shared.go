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

// This file is every call the Cache makes to the shared tier. Each one
//   - asks the SharedBreaker first, and is skipped (ErrBreakerOpen) while
//     it is open;
//   - runs on its own deadline, SharedTimeout from the call, whatever the
//     caller's deadline and the loader timeout: reads keep the caller's
//     cancellation (a caller that left need not wait), writes do not (a
//     write once started completes or times out);
//   - reports its outcome to the breaker: a failure for an error or a
//     timeout, a success for a hit or a miss, and nothing but a success
//     when the caller's own context ended (the caller leaving says nothing
//     about the tier) or the error is about one entry or key (see
//     entryLevel);
//   - converts times between the Cache's clock (Options.Now) and the wall
//     clock the shared tier holds (see toWall), all but Version, which
//     is on the wall clock in both tiers.

// sharedCall runs call against the shared tier under the breaker and
// SharedTimeout. keepCancel keeps ctx's cancellation (reads).
func (c *Cache[V]) sharedCall(ctx context.Context, keepCancel bool, call func(context.Context) error) error {
	failed := true // until call returns: a panicking store is a failure
	if c.opts.SharedBreaker != nil {
		done, err := c.opts.SharedBreaker.Allow()
		c.noteBreaker(ctx)
		if err != nil {
			if !errors.Is(err, driver.ErrBreakerOpen) {
				err = fmt.Errorf("%w: %w", driver.ErrBreakerOpen, err)
			}
			return err
		}
		// Deferred, so that a store that panics still reports and a
		// half-open breaker does not wait for it forever.
		defer func() {
			done(failed)
			c.noteBreaker(ctx)
		}()
	}
	parent := ctx
	if !keepCancel {
		parent = context.WithoutCancel(ctx)
	}
	cctx, cancel := context.WithTimeout(parent, c.opts.SharedTimeout)
	defer cancel()
	err := call(cctx)
	// A read the caller abandoned says nothing about the tier; a write
	// ignores the caller's cancellation, so its error counts, unless it is
	// about one entry or key, not the tier.
	failed = err != nil && !(keepCancel && ctx.Err() != nil) && !entryLevel(err)
	if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) && (cctx.Err() != nil || isTimeout(err)) {
		// The call's own deadline passed, but the store said so in its own
		// words: go-redis reports a read cut short by the deadline as a
		// network "i/o timeout", not as context.DeadlineExceeded. Say it is
		// a timeout, so that the Get leaves the tier alone from here on.
		err = fmt.Errorf("flightcache: shared tier call timed out: %w (%w)", context.DeadlineExceeded, err)
	}
	return err
}

// entryLevel reports whether err is about one entry or key (corrupt, bound
// to another key, too large, an invalid key), which the tier handled
// correctly: a success for the breaker, a miss or a failed write of that
// key for the caller.
func entryLevel(err error) bool {
	return errors.Is(err, driver.ErrEntryRejected) || errors.Is(err, ErrInvalidKey)
}

// isTimeout reports whether err says it is a timeout, as net.Error does.
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// sharedSkip says why a Get stopped calling the shared tier; see
// miss.sharedDown. One byte, beside miss.led: every caller of a stampede
// allocates a miss.
type sharedSkip uint8

const (
	sharedUsable   sharedSkip = iota
	sharedTimedOut            // a shared call of this Get outlasted SharedTimeout
	sharedRefused             // the breaker refused a shared call of this Get
)

var (
	errSkippedTimedOut = fmt.Errorf("flightcache: shared write-back skipped after a shared read timed out: %w", context.DeadlineExceeded)
	errSkippedRefused  = fmt.Errorf("flightcache: shared write-back skipped: %w", driver.ErrBreakerOpen)
	errSkippedNoLease  = fmt.Errorf("flightcache: shared write-back skipped, the flight holds no lease: %w", ErrCoordinatorUnavailable)
)

// sharedWritable applies coherence.Model.SharedWritable to a read-path
// write of the shared tier that holds no lease (a write-back, a batch's
// write-back): it may write unless there is no shared tier, the caller
// found it unavailable (down: then skipErr says so, for Result.WriteErr),
// the Cache closed, or the Cache is in cluster mode. There only a leader's
// fenced write (Lease.Complete) may reach the shared tier: an unfenced
// write of a load that read the origin before a Set on another instance
// would overwrite that Set for the entry's whole TTL. A flight without a
// lease (degraded, or loading after CoalesceWait) and a batch write the
// local tier only, which is not a failure.
func (c *Cache[V]) sharedWritable(down sharedSkip) (ok bool, skipErr error) {
	switch {
	case c.opts.Shared == nil:
		return false, nil
	case down != sharedUsable:
		return false, down.err()
	case c.opts.Coordinator != nil:
		return c.coh.SharedWritable(coherence.Unleased, false), nil
	}
	return c.coh.SharedWritable(coherence.Direct, false), nil
}

// err is the write-back error of a Get that skipped the tier.
func (s sharedSkip) err() error {
	if s == sharedRefused {
		return errSkippedRefused
	}
	return errSkippedTimedOut
}

// unavailable tells from a shared call's error whether the tier cannot be
// used for now: the call's own timeout (not the caller's) or an open
// breaker. Other errors are cheap to meet again and leave it usable.
func unavailable(ctx context.Context, err error) sharedSkip {
	switch {
	case err == nil || ctx.Err() != nil:
		return sharedUsable
	case errors.Is(err, driver.ErrBreakerOpen):
		return sharedRefused
	case errors.Is(err, context.DeadlineExceeded):
		return sharedTimedOut
	}
	return sharedUsable
}

// noteBreaker reports a change of the breaker's state, once per change
// whichever goroutine sees it first.
func (c *Cache[V]) noteBreaker(ctx context.Context) {
	s := c.opts.SharedBreaker.State()
	old := driver.BreakerState(c.breakerState.Load())
	if s == old || !c.breakerState.CompareAndSwap(uint32(old), uint32(s)) {
		return
	}
	level := slog.LevelInfo
	if s == driver.BreakerOpen {
		level = slog.LevelWarn
	}
	c.opts.Logger.LogAttrs(ctx, level, "flightcache: shared tier circuit breaker changed state",
		slog.String("cache", c.opts.Name), slog.String("from", old.String()), slog.String("to", s.String()))
	if c.opts.Observer != nil {
		c.observe(driver.Event{Kind: driver.EventBreakerChanged, Ctx: ctx, Cache: c.opts.Name, Tier: driver.TierShared, Breaker: s})
	}
}

// readShared reads key from the shared tier. It returns the item when it is
// still servable (fresh or stale) and, then, copies it into the local tier
// under ticket t. Every failure is a miss: storeErr is the error of the
// call itself (a failing, hung or skipped tier), nil for an entry that was
// missing, expired or undecodable.
func (c *Cache[V]) readShared(ctx context.Context, key string, now time.Time, t coherence.Ticket) (it *driver.Item[V], storeErr error) {
	var (
		e  driver.Entry
		ok bool
	)
	err := c.sharedCall(ctx, true, func(ctx context.Context) (err error) {
		e, ok, err = c.opts.Shared.Get(ctx, key)
		return err
	})
	if err != nil {
		if ctx.Err() == nil { // the caller leaving is not a store failure
			c.readFailed(ctx, err)
		}
		return nil, err
	}
	if !ok {
		return nil, nil
	}
	return c.acceptShared(ctx, key, &e, now, t), nil
}

// acceptShared turns e, key's entry as read from the shared tier, into
// the item a read serves at now, or nil when it must be treated as absent,
// for Get, the flight's double-check, a refused leader's read back and
// batches alike: what coherence.Model.AcceptShared refuses, undecodable
// (a read failure too), or read before something this instance served
// since (DecideFill, under the key's lock). t is the
// reader's ticket, under which the local tier gets a copy.
func (c *Cache[V]) acceptShared(ctx context.Context, key string, e *driver.Entry, now time.Time, t coherence.Ticket) *driver.Item[V] {
	m := c.fromWall(e.Meta)
	switch j := c.coh.AcceptShared(key, copyOf(&m, time.Time{}), now, c.opts.ClockSkew); {
	case j.State == coherence.Unusable:
		// Covered (older than something this instance wrote, applied or
		// served: absent, so that the next load overwrites it), or
		// expired.
		return nil
	case j.Why == coherence.WhyTagExpired && now.Before(m.FreshUntil):
		// Stale from now on: the fallback of the load that replaces it.
		m.FreshUntil = now
	}
	it := &driver.Item[V]{Meta: m}
	if !m.NotFound {
		v, err := c.opts.Codec.Unmarshal(e.Value)
		if err != nil {
			c.readFailed(ctx, fmt.Errorf("flightcache: decode shared entry: %w", err))
			return nil
		}
		it.Value = v
	}
	newer, older := c.fill(t, key, it, true)
	switch {
	case older:
		// Read before something this instance served since the check
		// above: absent, as if covered.
		return nil
	case newer != nil:
		// This instance holds a fresh copy read later than the entry (a
		// slow peer's write-back): serving the entry would go back in
		// time. If the copy is not to be trusted either (the Bus is
		// down), the entry is absent and the key loads.
		if c.untrusted(newer, now) {
			return nil
		}
		return newer
	}
	return it
}

// encode turns it into the entry the shared tier stores: its value through
// the codec, its times on the wall clock (see toWall). Encoding is CPU
// work in the calling goroutine and has no deadline; only the store call
// is bounded by SharedTimeout.
func (c *Cache[V]) encode(it *driver.Item[V]) (driver.Entry, error) {
	e := driver.Entry{Meta: toWall(it.Meta)}
	if it.NotFound {
		return e, nil
	}
	data, err := c.opts.Codec.Marshal(it.Value)
	if err != nil {
		return e, fmt.Errorf("flightcache: encode value: %w", err)
	}
	e.Value = data
	return e, nil
}

// encodeSafely is encode with a panic in the codec turned into an error
// (whose text leaves out the panic value: it may hold the key).
func (c *Cache[V]) encodeSafely(it *driver.Item[V]) (e driver.Entry, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("flightcache: encode value: codec panicked (%T)", p)
		}
	}()
	return c.encode(it)
}

// setShared stores e under key in the shared tier.
func (c *Cache[V]) setShared(ctx context.Context, key string, e driver.Entry) error {
	return c.sharedCall(ctx, false, func(ctx context.Context) error { return c.opts.Shared.Set(ctx, key, e) })
}

// deleteShared removes key from the shared tier.
func (c *Cache[V]) deleteShared(ctx context.Context, key string) error {
	return c.sharedCall(ctx, false, func(ctx context.Context) error { return c.opts.Shared.Delete(ctx, key) })
}

// toWall converts the times in m from the Cache's clock to the wall clock,
// for the shared tier: other processes compare them with their own clocks,
// so they must be real times whatever Options.Now is (a fake clock in
// tests, a coarse one on the hot path). m.Version is on the wall clock
// already, read precisely when the item was made (miss.loadOrigin, Set):
// the entry's LoadedAt is Version + LoadDuration, so that a store that
// keeps only LoadedAt and LoadDuration gives the Version back exactly
// (fromWall), and the offset of the other times is taken from the two
// readings of the end of the load, not from the coarse clock now, whose
// lag would shift them by a tick or more.
func toWall(m driver.Meta) driver.Meta {
	if m.Version.IsZero() {
		return m
	}
	loadedAt := m.Version.Add(m.LoadDuration)
	off := time.Duration(loadedAt.UnixNano() - m.LoadedAt.UnixNano())
	m.FreshUntil = shiftTime(m.FreshUntil, off)
	m.StaleUntil = shiftTime(m.StaleUntil, off)
	m.LoadedAt = loadedAt
	return m
}

// fromWall converts the wall-clock times of an entry read from the shared
// tier to the Cache's clock, and caps them: the entry was written by another
// process, possibly with other options, possibly corrupt or hostile, and
// must not outlive what this Cache would have stored. FreshUntil is at most
// now + Options.MaxTTL and LoadedAt + Options.MaxTTL, StaleUntil at most FreshUntil + StaleFor (FreshUntil for a
// tombstone) and never before FreshUntil, LoadDuration at most the loader
// timeout (XFetch would otherwise refresh on every hit), LoadedAt at most
// now plus ClockSkew. Version stays on the wall clock: derived from
// LoadedAt − LoadDuration when the store keeps no Version, unknown (zero)
// when ahead of this host's clock by more than ClockSkew.
func (c *Cache[V]) fromWall(m driver.Meta) driver.Meta {
	now, wallNow := c.opts.Now(), time.Now()
	if m.Version.IsZero() && !m.LoadedAt.IsZero() {
		// The one place a Version is derived: a store that keeps only
		// LoadedAt and LoadDuration (redisstore's envelope) has the
		// Version the Cache wrote (see toWall).
		m.Version = m.LoadedAt.Add(-m.LoadDuration)
	}
	if m.Version.After(wallNow.Add(c.opts.ClockSkew)) {
		// Written by a host with a wrong clock: unknown, so that it
		// neither passes for newer than every fence nor raises the key's
		// version into the future, which would refuse every correct
		// entry of the key for the fence window.
		m.Version = time.Time{}
	}
	off := time.Duration(now.UnixNano() - wallNow.UnixNano())
	m.FreshUntil = shiftTime(m.FreshUntil, off)
	m.StaleUntil = shiftTime(m.StaleUntil, off)
	m.LoadedAt = shiftTime(m.LoadedAt, off)
	if limit := now.Add(c.opts.ClockSkew); m.LoadedAt.After(limit) {
		// Written by a host whose clock runs ahead: taken as now, so that
		// it does not look newer than what this instance reads later.
		m.LoadedAt = now
	}
	if limit := now.Add(c.opts.MaxTTL); m.FreshUntil.After(limit) {
		m.FreshUntil = limit
	}
	if limit := m.LoadedAt.Add(c.opts.MaxTTL); !m.LoadedAt.IsZero() && m.FreshUntil.After(limit) {
		// Nor past MaxTTL from its load: reading an entry does not renew
		// it, so an entry loaded long ago that claims a long life is as
		// fresh here as this Cache would have stored it, and the age a
		// Result reports (Age) agrees with its freshness.
		m.FreshUntil = limit
	}
	staleLimit := m.FreshUntil
	if !m.NotFound {
		staleLimit = staleLimit.Add(c.opts.StaleFor)
	}
	if m.StaleUntil.After(staleLimit) {
		m.StaleUntil = staleLimit
	}
	if m.StaleUntil.Before(m.FreshUntil) {
		m.StaleUntil = m.FreshUntil
	}
	m.LoadDuration = min(max(m.LoadDuration, 0), c.opts.LoaderTimeout)
	return m
}

// shiftTime moves t by off, leaving the zero time (unknown) as it is. The
// result carries no monotonic reading: it is compared with other clocks.
func shiftTime(t time.Time, off time.Duration) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Add(off).Round(0)
}
