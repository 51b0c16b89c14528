package redislease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/redislease/internal/buswire"
)

// Defaults and bounds of the bus's Options.
const (
	// DefaultHeartbeatInterval is how often a subscribed Coordinator sends
	// itself a heartbeat through Redis: a few messages a second per
	// instance, each to the instance alone.
	DefaultHeartbeatInterval = 250 * time.Millisecond
	// DefaultDownAfter is how long the bus may go without a heartbeat
	// coming back before it reports BusDown.
	DefaultDownAfter = time.Second

	minHeartbeatInterval = 10 * time.Millisecond
	maxHeartbeatInterval = 10 * time.Second
	maxDownAfter         = time.Minute
	// busQueueLen and busQueueBytes bound the invalidations waiting for
	// one subscription's handler, in number and in bytes of targets;
	// beyond either, all of them are dropped and the subscription goes
	// down until the handler caught up.
	busQueueLen   = 4096
	busQueueBytes = 16 << 20
)

var _ driver.Bus = (*Coordinator)(nil)

// ErrAlreadySubscribed is returned by Subscribe for a cache name that
// already has an active subscription on the Coordinator: Caches of the same
// name on one Coordinator would never hear each other's invalidations
// (a Coordinator does not deliver its own), so each needs its own
// Coordinator, or they need distinct names. The name is free again once
// the first subscription's stop returned.
var ErrAlreadySubscribed = errors.New("redislease: bus: this cache name is already subscribed on this Coordinator")

// ErrNotDelivered is matched by the error of a Publish whose message Redis
// accepted but which did not come back on the Coordinator's own
// subscription before the call's deadline, or before its last
// subscription stopped: the other instances may not have it yet, or ever
// (see Publish). The error also matches the context's error when the
// deadline ended the wait.
var ErrNotDelivered = errors.New("redislease: bus: the message did not come back on this Coordinator's own subscription")

// BusStats are a Coordinator's bus counters since New.
type BusStats struct {
	// Published counts the invalidations Publish handed to Redis.
	Published uint64
	// Unconfirmed counts the Publishes among them that failed with
	// ErrNotDelivered: the message did not come back on the Coordinator's
	// own subscription in time.
	Unconfirmed uint64
	// Received counts the well-formed invalidations that arrived from
	// other Coordinators, whether or not a subscription wanted them.
	Received uint64
	// Dropped counts the messages on the bus's channels, and the members of
	// the sets of retained invalidations, that did not decode; they never
	// reach a handler.
	Dropped uint64
	// Overflowed counts the invalidations dropped because a handler had
	// fallen too far behind: 4096 invalidations, or 16 MiB of targets,
	// waiting for it.
	Overflowed uint64
	// Disconnects counts the moves of the bus from BusUp to BusDown: a
	// heartbeat failed or came back late, or the subscription was
	// confirmed again after a reconnect.
	Disconnects uint64
	// Resubscribed counts the confirmations of the bus channel's
	// subscription after its first one in a run: go-redis reconnected and
	// subscribed again, or the bus, down for DownAfter with its channels
	// confirmed, subscribed them again; messages may have been lost in
	// between.
	Resubscribed uint64
	// Replayed counts the retained bulk invalidations delivered to
	// handlers before their BusUp (see Subscribe).
	Replayed uint64
	// LastMessage is when the last message of any kind (heartbeats
	// included) arrived on the bus's channels; zero if none did.
	LastMessage time.Time
	// State is the bus's state: BusNone while nothing is subscribed.
	State driver.BusState
}

// bus is the Coordinator's driver.Bus. It runs while something is
// subscribed: a run attaches the bus channel and the Coordinator's own
// heartbeat channel to the subscriber of their shard, the one the lease
// channels use, and heartbeats through Redis to know whether messages
// arrive.
type bus struct {
	c         *Coordinator
	origin    uint64
	channel   string // the bus channel: <prefix>{bus}
	hbChannel string // this Coordinator's heartbeats: <prefix>{bus}|hb|<origin>
	interval  time.Duration
	downAfter time.Duration
	retention time.Duration    // Options.BulkRetention
	bulkCap   int              // maxBulkRetained; tests lower it
	now       func() time.Time // time.Now; tests move it

	published, unconfirmed, received, dropped, overflowed, disconnects, resubscribed, replayed atomic.Uint64
	lastMessage                                                                                atomic.Int64 // Unix nanoseconds, 0 for none

	// echoes holds, by message, the Publishes waiting for their message to
	// come back on the bus channel's subscription. An entry is added
	// before its PUBLISH is sent, so its echo cannot come first; the echo
	// closes seen and removes the entry, and the last waiter to give up
	// removes it too. Publishes of identical messages share an entry: any
	// one of their echoes tells each of them that the invalidation they
	// carry has reached every subscriber. Guarded by echoMu.
	echoMu sync.Mutex
	echoes map[string]*echo

	mu     sync.Mutex
	subs   map[string]*busSub // by cache name, one each; guarded by mu
	run    *busRun            // the current run, nil while nothing is subscribed; guarded by mu
	prev   *busRun            // the last run stopped; guarded by mu
	closed bool               // guarded by mu
	// The current run's state, guarded by mu. A heartbeat counts only if
	// its sequence number is at least minSeq, which moves past every
	// heartbeat sent so far whenever the bus channel is confirmed (again)
	// or the bus goes down: BusUp needs a heartbeat sent after both.
	state        driver.BusState
	busConfirmed bool // the bus channel's subscription was confirmed
	hbConfirmed  bool // the heartbeat channel's subscription was confirmed
	nextSeq      uint64
	minSeq       uint64
	lastBack     time.Time // when the last counted heartbeat came back
	downSince    time.Time // when the state last moved to BusDown
}

func newBus(c *Coordinator, interval, downAfter, retention time.Duration) *bus {
	b := &bus{
		c: c, origin: rand.Uint64(), interval: interval, downAfter: downAfter,
		retention: retention, bulkCap: maxBulkRetained, now: time.Now,
		subs: make(map[string]*busSub), echoes: make(map[string]*echo),
	}
	b.channel = c.store.Prefix() + "{bus}"
	b.hbChannel = string(buswire.AppendHex16([]byte(b.channel+"|hb|"), b.origin))
	return b
}

// Publish implements driver.Bus. An InvalidationKey is one PUBLISH
// (SPUBLISH on a Cluster) of inv, with the raw key, on the bus channel. A
// bulk invalidation (InvalidationPrefix, InvalidationAll) or a tag one
// (InvalidationTag, InvalidationTagExpire) is one script,
// in the bus's slot, that first records it in the cache's set of retained
// invalidations (see Options.BulkRetention and Subscribe) and then
// publishes it the same way, so that instances that miss the message
// still get it. Every other Coordinator on the same store prefix whose
// subscription for cache is active receives it; this one does not deliver
// it.
//
// While anything is subscribed on this Coordinator (a Cache with a Bus
// always is), Publish then waits until the message comes back on its own
// subscription of the bus channel. Redis hands a message to all the
// subscribers of a channel at once, in the order it executes the
// publishes, so by then it has been handed to every other subscriber's
// connection as well: what remains before another instance stops serving
// older values is the network's last hop to it and its own handler (see
// docs/ARCHITECTURE.md for the measured bound). If the message does not
// come back before ctx or Options.Timeout ends, or the last subscription
// stops meanwhile, Publish fails with an error matching ErrNotDelivered:
// Redis accepted the message, but whether anyone got it is unknown, so the
// caller must treat it as not published (a Cache redoes it later; a
// repeated invalidation is harmless). Without a subscription there is
// nothing to wait for, and Publish returns once Redis accepted the
// message. The whole call is bounded by ctx and Options.Timeout.
//
// It also fails for a closed Coordinator, an Invalidation that is not
// well formed (see driver.Invalidation; a Version before 1970, an
// empty cache name, or one longer than 255 bytes, a Target longer than 64
// KiB), or when Redis did not accept the message (a bulk invalidation that
// could not be recorded is not published).
func (c *Coordinator) Publish(ctx context.Context, cache string, inv driver.Invalidation) error {
	b := c.bus
	if c.isClosed() {
		return errClosed
	}
	msg, err := buswire.Append(make([]byte, 0, buswire.MaxHeader+len(cache)+len(inv.Target)), b.origin, cache, inv)
	if err != nil {
		return err
	}
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	run, e := b.expectEcho(msg)
	if e != nil {
		defer b.forgetEcho(msg, e)
	}
	if inv.Kind == driver.InvalidationKey {
		err = c.publishTo(ctx, b.channel, msg)
	} else {
		err = c.publishBulk(ctx, cache, inv, msg)
	}
	if err != nil {
		return fmt.Errorf("redislease: bus: publish: %w", err)
	}
	b.published.Add(1)
	if e == nil {
		return nil
	}
	select {
	case <-e.seen:
		return nil
	case <-ctx.Done():
		b.unconfirmed.Add(1)
		return fmt.Errorf("redislease: bus: publish: %w: %w", ErrNotDelivered, ctx.Err())
	case <-run.ctx.Done():
		b.unconfirmed.Add(1)
		return fmt.Errorf("redislease: bus: publish: %w: the subscription stopped", ErrNotDelivered)
	}
}

// echo is what the Publishes of one message wait for: seen is closed when
// the message came back on the bus channel's subscription. n counts the
// Publishes waiting; both are guarded by bus.echoMu.
type echo struct {
	seen chan struct{}
	n    int
}

// expectEcho registers a Publish of msg that waits for its echo, with the
// run whose subscription will bring it; it returns nils while nothing is
// subscribed (no run, no echo to wait for).
func (b *bus) expectEcho(msg []byte) (*busRun, *echo) {
	b.mu.Lock()
	run := b.run
	b.mu.Unlock()
	if run == nil {
		return nil, nil
	}
	b.echoMu.Lock()
	defer b.echoMu.Unlock()
	e := b.echoes[string(msg)]
	if e == nil {
		e = &echo{seen: make(chan struct{})}
		b.echoes[string(msg)] = e
	}
	e.n++
	return run, e
}

// forgetEcho ends a Publish's wait for msg's echo.
func (b *bus) forgetEcho(msg []byte, e *echo) {
	b.echoMu.Lock()
	defer b.echoMu.Unlock()
	e.n--
	if e.n == 0 && b.echoes[string(msg)] == e {
		delete(b.echoes, string(msg))
	}
}

// echoed releases the Publishes waiting for payload, a message of this
// Coordinator's origin that came back.
func (b *bus) echoed(payload string) {
	b.echoMu.Lock()
	defer b.echoMu.Unlock()
	if e := b.echoes[payload]; e != nil {
		close(e.seen)
		delete(b.echoes, payload)
	}
}

// publishTo publishes msg on channel, bounded by Options.Timeout.
func (c *Coordinator) publishTo(ctx context.Context, channel string, msg []byte) error {
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	if c.cluster != nil {
		return c.cluster.SPublish(ctx, channel, msg).Err()
	}
	return c.client.Publish(ctx, channel, msg).Err()
}

func (c *Coordinator) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Subscribe implements driver.Bus: it delivers the invalidations
// other Coordinators publish for cache to h, with the bus's state. A cache
// name has one subscription at a time per Coordinator: a second Subscribe
// of it fails with ErrAlreadySubscribed until the first one's stop
// returned.
//
// The first subscription starts the bus: it subscribes the bus channel and
// its own heartbeat channel over the Coordinator's subscription connection
// (the one its lease channels use), and heartbeats every
// Options.HeartbeatInterval; the last stop ends it. The bus is up once the
// bus channel's subscription is confirmed and a heartbeat sent after that
// came back; it goes down when a heartbeat cannot be sent, when none came
// back for Options.DownAfter, or when the subscription is confirmed again
// (go-redis reconnected: messages may have been lost meanwhile). On a
// Redis Cluster, while the bus is down, the Coordinator asks go-redis to
// reload its slot map at every heartbeat: when the master of the bus
// channel's slot dies and a replica takes over, the bus subscribes on the
// new master about DownAfter after the Cluster's failover, not at
// go-redis's next periodic reload (every minute by default).
//
// Before each BusChanged(BusUp) of a subscription, the first one
// included, the subscription reads its cache's retained bulk
// invalidations, those published within Options.BulkRetention (this
// Coordinator's own included), and delivers them to h.Invalidated, oldest
// first. The read comes after the bus channel's subscription was
// confirmed, so a bulk invalidation is either read or arrives as a
// message. If the read fails, the subscription stays down and reads again
// at the next heartbeat that comes back; BusStats.State, the bus's own
// state, may be up meanwhile. Retained targets beyond 16 MiB are replayed
// as one InvalidationAll as new as the newest of them, which covers them
// all.
//
// Each subscription has its own goroutine and a queue bounded by 4096
// invalidations and by 16 MiB of targets: the connection's reader never
// waits for h. When the bus goes down, the invalidations still queued are
// dropped and BusDown is h's next call, after the one in progress; the
// replay before BusUp makes up for the bulk invalidations among them, and
// the Cache resynchronises for the rest. A handler that falls further
// behind than the queue holds loses everything queued for it the same
// way, and is told BusDown next, then BusUp once it caught up (if the bus
// is up), after a replay. stop is idempotent, cancels a replay's read and
// waits for a call to h in progress, so it must not be called from h's
// methods.
func (c *Coordinator) Subscribe(cache string, h driver.BusHandler) (stop func(), err error) {
	switch {
	case h == nil:
		return nil, errors.New("redislease: bus: nil handler")
	case cache == "":
		return nil, errors.New("redislease: bus: empty cache name")
	case len(cache) > buswire.MaxCache:
		return nil, errors.New("redislease: bus: cache name longer than " + strconv.Itoa(buswire.MaxCache) + " bytes")
	}
	b := c.bus
	s := &busSub{b: b, cache: cache, h: h, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), delivered: driver.BusDown}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	b.mu.Lock()
	if b.closed || c.isClosed() {
		b.mu.Unlock()
		return nil, errClosed
	}
	if b.subs[cache] != nil {
		b.mu.Unlock()
		return nil, ErrAlreadySubscribed
	}
	b.subs[cache] = s
	if b.run == nil {
		b.startRun()
	}
	s.global = b.state
	if b.state == driver.BusUp {
		s.push(busEvent{state: driver.BusUp})
	}
	b.mu.Unlock()
	go s.deliver()
	return s.end, nil
}

// BusStats returns the bus's counters and state.
func (c *Coordinator) BusStats() BusStats {
	b := c.bus
	st := BusStats{
		Published: b.published.Load(), Unconfirmed: b.unconfirmed.Load(), Received: b.received.Load(), Dropped: b.dropped.Load(),
		Overflowed: b.overflowed.Load(), Disconnects: b.disconnects.Load(), Resubscribed: b.resubscribed.Load(),
		Replayed: b.replayed.Load(),
	}
	if ns := b.lastMessage.Load(); ns != 0 {
		st.LastMessage = time.Unix(0, ns)
	}
	b.mu.Lock()
	st.State = b.state
	b.mu.Unlock()
	return st
}

// close ends every subscription, and with the last one the run.
func (b *bus) close() {
	b.mu.Lock()
	b.closed = true
	var subs []*busSub
	for _, s := range b.subs {
		subs = append(subs, s)
	}
	b.mu.Unlock()
	for _, s := range subs {
		s.end()
	}
}

// startRun starts a run. The caller holds b.mu.
func (b *bus) startRun() {
	ctx, cancel := context.WithCancel(context.Background())
	r := &busRun{b: b, prev: b.prev, ctx: ctx, cancel: cancel, kick: make(chan struct{}, 1), done: make(chan struct{})}
	b.run = r
	b.state, b.downSince = driver.BusDown, time.Now()
	b.busConfirmed, b.hbConfirmed = false, false
	b.minSeq = b.nextSeq
	go r.monitor()
}

// setState moves the run's state to st and tells every subscription. The
// caller holds b.mu.
func (b *bus) setState(st driver.BusState) {
	if st == driver.BusDown {
		// BusUp again needs a heartbeat sent from now on.
		b.minSeq = b.nextSeq
	}
	if b.state == st {
		return
	}
	if b.state == driver.BusUp {
		b.disconnects.Add(1)
	}
	if st == driver.BusDown {
		b.downSince = time.Now()
	}
	b.state = st
	for _, s := range b.subs {
		s.push(busEvent{state: st})
	}
}

// busRun is the bus between the first subscription and the last stop.
type busRun struct {
	b      *bus
	prev   *busRun // the run before, which must have ended before this one attaches
	ctx    context.Context
	cancel context.CancelFunc
	kick   chan struct{} // a heartbeat now, please: the subscription was confirmed
	done   chan struct{} // closed when the monitor returned

	// Owned by the monitor.
	sub        *subscriber // the subscriber the channels were given to
	shard      string
	attachedAt time.Time
}

// stop ends the run and waits for it. b.run no longer points to it.
func (r *busRun) stop() {
	r.cancel()
	<-r.done
}

// monitor attaches the run's channels, sends heartbeats, notices late
// ones, and attaches again while the channels are not confirmed. On its
// way out it detaches them, which unsubscribes them.
func (r *busRun) monitor() {
	defer close(r.done)
	b := r.b
	if r.prev != nil {
		// It is being stopped: its last subscription's end stops it.
		<-r.prev.done
		r.prev = nil // runs must not chain up
	}
	pub := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.heartbeats(pub)
	}()
	defer func() {
		wg.Wait()
		if r.sub != nil {
			r.sub.unlisten(r, b.channel, b.hbChannel)
		}
	}()
	r.attach()
	t := time.NewTicker(b.interval)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-r.kick:
		case now := <-t.C:
			b.mu.Lock()
			if b.run == r && b.state == driver.BusUp && now.Sub(b.lastBack) > b.downAfter {
				b.setState(driver.BusDown)
			}
			// Subscribe again while the channels are not confirmed, and
			// also while the bus stays down although they are: go-redis
			// subscribes a connection's channels again after a reconnect
			// with one command, which a Cluster refuses whole when they
			// span slots (the bus's and followers' lease channels share
			// the connection), and no confirmation says so.
			// Only once it has been down for DownAfter: a short outage
			// (Redis paused) ends without a new subscription, whose
			// confirmation would take the bus down once more.
			stuck := !(b.busConfirmed && b.hbConfirmed) || (b.state != driver.BusUp && now.Sub(b.downSince) >= b.downAfter)
			down := b.state != driver.BusUp
			b.mu.Unlock()
			if down && b.c.cluster != nil {
				// The bus channel's master may have died and a replica
				// taken over: go-redis would only learn the new slot map
				// at its periodic reload (every minute by default), and
				// keep sending heartbeats and subscriptions to the dead
				// master until then. Ask for a reload now, in the
				// background; the next attach finds the new master.
				b.c.cluster.ReloadState(r.ctx)
			}
			if r.sub == nil || (stuck && now.Sub(r.attachedAt) >= b.downAfter) {
				r.attach()
			}
		}
		select {
		case pub <- struct{}{}:
		default: // one is being sent
		}
	}
}

// heartbeats publishes a heartbeat for each request on pub, one at a time,
// until the run ends. A heartbeat is its sequence number in decimal; one
// of more than 19 digits (buswire.MaxUintDigits) is dropped on arrival.
func (r *busRun) heartbeats(pub <-chan struct{}) {
	b := r.b
	var buf []byte
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-pub:
		}
		b.mu.Lock()
		seq := b.nextSeq
		b.nextSeq++
		b.mu.Unlock()
		buf = strconv.AppendUint(buf[:0], seq, 10)
		if err := b.c.publishTo(r.ctx, b.hbChannel, buf); err != nil && r.ctx.Err() == nil {
			b.mu.Lock()
			if b.run == r {
				b.setState(driver.BusDown)
			}
			b.mu.Unlock()
		}
	}
}

// attach gives the run's channels to the subscriber of their shard, or
// subscribes them again on the one they have; on a Cluster whose slot
// moved, it moves them.
func (r *busRun) attach() {
	b := r.b
	ctx, cancel := b.c.opCtx(r.ctx)
	defer cancel()
	r.attachedAt = time.Now()
	shard, err := b.c.shardOf(ctx, b.channel)
	if err != nil {
		return
	}
	if r.sub != nil && r.shard == shard {
		_ = r.sub.listen(ctx, r, false, b.channel, b.hbChannel)
		return
	}
	if r.sub != nil {
		r.sub.unlisten(r, b.channel, b.hbChannel)
		r.sub = nil
	}
	s, _ := b.c.withSubscriber(ctx, shard, func(s *subscriber, first bool) error {
		return s.listen(ctx, r, first, b.channel, b.hbChannel)
	})
	if s != nil {
		r.sub, r.shard = s, shard
	}
}

// subscribed implements listener.
func (r *busRun) subscribed(channel string) {
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.run != r {
		return
	}
	switch channel {
	case b.channel:
		if b.busConfirmed {
			b.resubscribed.Add(1)
		}
		b.busConfirmed = true
		b.setState(driver.BusDown)
	case b.hbChannel:
		b.hbConfirmed = true
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// unsubscribed implements listener: the server ended a subscription (a
// Cluster slot moved).
func (r *busRun) unsubscribed(channel string) {
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.run != r {
		return
	}
	switch channel {
	case b.channel:
		b.busConfirmed = false
	case b.hbChannel:
		b.hbConfirmed = false
	}
	b.setState(driver.BusDown)
}

// message implements listener.
func (r *busRun) message(channel, payload string) {
	b := r.b
	now := time.Now()
	b.lastMessage.Store(now.UnixNano())
	if channel == b.hbChannel {
		seq, ok := buswire.CanonicalUint(payload, buswire.MaxUintDigits)
		if !ok {
			b.dropped.Add(1)
			return
		}
		b.mu.Lock()
		if b.run == r && b.busConfirmed && seq >= b.minSeq && seq < b.nextSeq {
			b.lastBack = now
			if b.state == driver.BusUp {
				// Subscriptions whose replay failed try again.
				for _, s := range b.subs {
					s.retryUp()
				}
			}
			b.setState(driver.BusUp)
		}
		b.mu.Unlock()
		return
	}
	m, err := buswire.Decode(payload)
	if err != nil {
		b.dropped.Add(1)
		return
	}
	if m.Origin == b.origin {
		b.echoed(payload)
		return
	}
	b.received.Add(1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.run != r {
		return
	}
	if s := b.subs[m.Cache]; s != nil {
		s.push(busEvent{inv: m.Inv})
	}
}

// busEvent is one call to a handler: Invalidated(inv), or BusChanged(state)
// when state is set.
type busEvent struct {
	inv   driver.Invalidation
	state driver.BusState
}

// busSub is one subscription: a bounded queue of events and the goroutine
// that delivers them.
type busSub struct {
	b     *bus
	cache string
	h     driver.BusHandler
	wake  chan struct{} // something was queued
	stop  chan struct{} // closed by end
	done  chan struct{} // closed when deliver returned
	once  sync.Once
	// ctx bounds the replay's reads; end cancels it.
	ctx    context.Context
	cancel context.CancelFunc

	mu sync.Mutex
	// q is a ring of n events from head, growing up to busQueueLen; bytes
	// is the length of the targets of its invalidations, at most
	// busQueueBytes.
	q       []busEvent
	head, n int
	bytes   int
	// global is the bus's state as last queued; lagging is set from an
	// overflow until the queue drained, and holds BusUp back meanwhile.
	global  driver.BusState
	lagging bool
	// flushes counts the times the queue was emptied (BusDown, overflow):
	// a replay begun before one must not end in BusUp. retry is set when a
	// replay could not read the retained invalidations, until the next
	// heartbeat queues BusUp again.
	flushes uint64
	retry   bool

	delivered driver.BusState // owned by deliver
}

// push queues ev. The caller holds b.mu, so events are queued in the order
// they happened. BusDown empties the queue first: the handler hears it
// next, without waiting for invalidations that the move back to BusUp
// makes up for. An invalidation that does not fit (busQueueLen events or
// busQueueBytes of targets) empties the queue too, and becomes BusDown.
func (s *busSub) push(ev busEvent) {
	s.mu.Lock()
	switch ev.state {
	case driver.BusDown:
		s.global = driver.BusDown
		s.flush()
	case driver.BusUp:
		s.global = driver.BusUp
		s.retry = false
		if s.lagging {
			s.mu.Unlock()
			return // delivered once the queue drained
		}
	default:
		if s.n == busQueueLen || s.bytes+len(ev.inv.Target) > busQueueBytes {
			// The handler is too far behind: what waits is dropped with
			// ev, and the subscription is down until it caught up.
			s.b.overflowed.Add(uint64(s.flush()) + 1)
			s.lagging = true
			ev = busEvent{state: driver.BusDown}
		}
	}
	if s.n == len(s.q) {
		grown := make([]busEvent, min(max(2*len(s.q), 16), busQueueLen))
		for i := range s.n {
			grown[i] = s.q[(s.head+i)%len(s.q)]
		}
		s.q, s.head = grown, 0
	}
	s.q[(s.head+s.n)%len(s.q)] = ev
	s.n++
	s.bytes += len(ev.inv.Target)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// flush empties the queue and returns how many invalidations it held. The
// caller holds s.mu.
func (s *busSub) flush() int {
	lost := 0
	for i := range s.n {
		if s.q[(s.head+i)%len(s.q)].state == 0 {
			lost++
		}
	}
	clear(s.q)
	s.head, s.n, s.bytes = 0, 0, 0
	s.flushes++
	s.retry = false
	return lost
}

// retryUp queues BusUp again if the last replay failed. The caller holds
// b.mu.
func (s *busSub) retryUp() {
	s.mu.Lock()
	retry := s.retry
	s.mu.Unlock()
	if retry {
		s.push(busEvent{state: driver.BusUp})
	}
}

// next pops the next event, with the number of flushes so far; once the
// queue drained after an overflow, that is BusUp if the bus is up.
func (s *busSub) next() (busEvent, uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n > 0 {
		ev := s.q[s.head]
		s.q[s.head] = busEvent{}
		s.head = (s.head + 1) % len(s.q)
		s.n--
		s.bytes -= len(ev.inv.Target)
		return ev, s.flushes, true
	}
	if s.lagging {
		s.lagging = false
		if s.global == driver.BusUp {
			return busEvent{state: driver.BusUp}, s.flushes, true
		}
	}
	return busEvent{}, 0, false
}

// flushed reports whether the queue was emptied since flushes was read.
func (s *busSub) flushed(flushes uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flushes != flushes
}

// replay delivers the retained bulk invalidations of the subscription's
// cache, oldest first, ahead of a BusUp, and reports whether that BusUp
// may follow: not if the read failed (the next heartbeat queues BusUp
// again), if the queue was emptied meanwhile (BusDown is next), or if the
// subscription ended.
func (s *busSub) replay(flushes uint64) bool {
	invs, err := s.b.retained(s.ctx, s.cache)
	if err != nil {
		s.mu.Lock()
		if s.flushes == flushes {
			s.retry = true
		}
		s.mu.Unlock()
		return false
	}
	for _, inv := range invs {
		if s.ctx.Err() != nil || s.flushed(flushes) {
			return false
		}
		s.h.Invalidated(inv)
		s.b.replayed.Add(1)
	}
	return s.ctx.Err() == nil && !s.flushed(flushes)
}

// deliver calls the handler for each event, in order, until end.
func (s *busSub) deliver() {
	defer close(s.done)
	for {
		select {
		case <-s.stop:
			return
		case <-s.wake:
		}
		for {
			ev, flushes, ok := s.next()
			if !ok {
				break
			}
			select {
			case <-s.stop:
				return
			default:
			}
			switch {
			case ev.state == 0:
				s.h.Invalidated(ev.inv)
			case ev.state == s.delivered:
			case ev.state == driver.BusUp && !s.replay(flushes):
			default:
				s.delivered = ev.state
				s.h.BusChanged(ev.state)
			}
		}
	}
}

// end is the subscription's stop: no call to the handler starts after it
// and none is in progress when it returns. The last subscription's end
// stops the run.
func (s *busSub) end() {
	s.once.Do(func() {
		b := s.b
		b.mu.Lock()
		if b.subs[s.cache] == s {
			delete(b.subs, s.cache)
		}
		var r *busRun
		if len(b.subs) == 0 && b.run != nil {
			r = b.run
			b.run, b.prev = nil, r
			b.state = driver.BusNone
		}
		b.mu.Unlock()
		close(s.stop)
		s.cancel()
		<-s.done
		if r != nil {
			r.stop()
		}
	})
}
