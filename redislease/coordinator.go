package redislease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/redisstore"
	"github.com/redis/go-redis/v9"
)

// Defaults and bounds of Options.
const (
	// DefaultLeaseTTL is long enough to ride out a garbage-collection pause
	// or a slow Redis round trip between heartbeats (every TTL/3), short
	// enough that a crashed leader is replaced within a few seconds.
	DefaultLeaseTTL = 3 * time.Second
	// DefaultFailureWindow is how long a failed load answers for its key:
	// long enough to absorb a retry storm, short enough that the next try
	// soon reaches the origin again.
	DefaultFailureWindow = time.Second
	// DefaultTimeout bounds one Redis call, as flightcache's
	// DefaultSharedTimeout does for the shared tier.
	DefaultTimeout = 250 * time.Millisecond

	minLeaseTTL = 100 * time.Millisecond
	maxLeaseTTL = time.Minute
	// The follower's safety-net re-check: jittered, doubling, never
	// sooner than minRecheck, never later than maxRecheck.
	minRecheck = 50 * time.Millisecond
	maxRecheck = time.Second
	// expiryGrace is added to a lease's remaining TTL before a follower
	// tries to take it over, so that it looks just after the expiry.
	expiryGrace = 2 * time.Millisecond
)

// ErrUnreachable is matched by New's error when Redis does not answer.
var ErrUnreachable = errors.New("redislease: redis unreachable")

// ErrNoPermission is matched by New's error when the Redis user may not do
// what the Coordinator needs: run scripts on the keys under the store's
// prefix, and publish and subscribe on the channels under it (an ACL
// user needs ~<prefix>* and &<prefix>*; Redis 7 grants no channel by
// default).
var ErrNoPermission = errors.New("redislease: the redis user lacks a permission the coordinator needs")

// Options configures a Coordinator. The zero value is valid.
type Options struct {
	// LeaseTTL is how long a lease lasts without a heartbeat; the holder
	// extends it every LeaseTTL/3 while it loads. A crashed holder is
	// replaced within LeaseTTL plus one follower re-check. Must be in
	// [100ms, 1m]. Default DefaultLeaseTTL.
	LeaseTTL time.Duration
	// FailureWindow is how long a failed load keeps answering for its key
	// on every instance (ErrLeaderFailed) instead of a new load. Must be in
	// [1ms, 1m]. Default DefaultFailureWindow.
	FailureWindow time.Duration
	// Timeout bounds each Redis call. Must be in [1ms, 10s]. Default
	// DefaultTimeout.
	Timeout time.Duration
	// HeartbeatInterval is how often the bus, while something is
	// subscribed, publishes a heartbeat to itself through Redis (see
	// Coordinator.Subscribe). Must be in [10ms, 10s]. Default
	// DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// DownAfter is how long the bus may go without a heartbeat coming
	// back before it reports BusDown. Must be at least twice
	// HeartbeatInterval and at most 1m. Default DefaultDownAfter, or four
	// HeartbeatIntervals if that is longer.
	DownAfter time.Duration
	// BulkRetention is how long the bus keeps bulk invalidations
	// (InvalidationPrefix, InvalidationAll) in Redis, to replay them to
	// subscriptions that missed them (see Coordinator.Subscribe). It must
	// cover the longest TTL plus StaleFor of the Caches on the bus: until
	// then the shared tier may still hold entries they cover, which an
	// instance that missed the invalidation would serve. Use the same
	// value on every instance. Must be in [1m, 720h]. Default
	// DefaultBulkRetention (25h: any TTL up to 24h with StaleFor up to
	// 1h).
	BulkRetention time.Duration
	// ReadInClaim makes a Cache's shared read of a single-key Get that
	// missed its local tier the flight's first Claim, a read-or-claim look
	// (see ClaimReads), instead of a plain bounded GET before the flight:
	// the look reads the entry and, when there is none, takes the lease in
	// the same script. A cold miss then costs 2 Redis round trips instead
	// of 3, but a warm shared hit (a value another instance stored) costs
	// a script instead of a GET: measured 4.4 µs of Redis time against
	// 0.37 µs per hit, 101 µs against 70 µs for the caller, and 63
	// allocations against 22 (the hit runs inside a flight). In a cluster
	// of N instances shared hits outnumber cold misses about N-1 to 1, so
	// the default (false) keeps the GET. Choose ReadInClaim where most
	// local misses are also shared misses: one instance, or keys read
	// about once per TTL.
	ReadInClaim bool
}

// Coordinator is a driver.Coordinator on Redis. It shares its client
// and key layout with a redisstore.Store (built with HashTag), so its fenced
// write stores exactly what the Store reads. It is also a driver.Bus
// for the Caches on that store prefix (see Publish and Subscribe). It is
// safe for concurrent use and does not own the client. Close it after the
// Caches that use it.
type Coordinator struct {
	client     redis.UniversalClient
	store      *redisstore.Store
	readClaim  bool                 // Options.ReadInClaim
	cluster    *redis.ClusterClient // nil outside Redis Cluster
	leaseTTL   time.Duration
	failWindow time.Duration
	timeout    time.Duration

	bus *bus

	// groups queue the lease scripts' concurrent calls, per script and
	// master, to send them in one pipeline (see runScript).
	groupMu sync.Mutex
	groups  map[groupKey]*scriptGroup // guarded by groupMu

	mu     sync.Mutex
	subs   map[string]*subscriber // per shard address ("" outside Cluster); guarded by mu
	closed bool                   // guarded by mu
}

var _ driver.Coordinator = (*Coordinator)(nil)

// New returns a Coordinator on client, for the keys of store. It checks
// the options, then PINGs Redis (every master, on a Cluster) and returns an
// error matching ErrUnreachable if it does not answer within ctx (5s when
// ctx has no deadline; these checks are not held to Options.Timeout, which
// bounds each call once the Coordinator runs): asking for cluster mode against a Redis that is not
// there is a configuration error, reported at start, never a silent
// fallback to process-local coalescing. It then checks that the Redis
// user may do what the Coordinator does (a script on a key under the
// prefix, PUBLISH and SUBSCRIBE, sharded on a Cluster, on a channel under
// it) and returns an error matching ErrNoPermission, naming what is
// missing, if it may not: an ACL user without the prefix's channels would
// lose cluster coalescing and the bus silently. A client with go-redis
// client-side caching on (on a Cluster: any master's client) is refused
// with an error matching redisstore.ErrClientSideCaching; see
// redisstore.CheckClient.
func New(ctx context.Context, client redis.UniversalClient, store *redisstore.Store, opts Options) (*Coordinator, error) {
	switch {
	case client == nil:
		return nil, &flightcache.ConfigError{Field: "client", Reason: "is nil"}
	case store == nil:
		return nil, &flightcache.ConfigError{Field: "store", Reason: "is nil"}
	case !store.HashTag():
		return nil, &flightcache.ConfigError{Field: "store", Reason: "must be built with redisstore.Options.HashTag, so a key's value, lease and token share a Redis Cluster slot"}
	}
	if err := redisstore.CheckClient(client); err != nil {
		return nil, err
	}
	c := &Coordinator{client: client, store: store, readClaim: opts.ReadInClaim, leaseTTL: opts.LeaseTTL, failWindow: opts.FailureWindow, timeout: opts.Timeout, subs: make(map[string]*subscriber)}
	if c.leaseTTL == 0 {
		c.leaseTTL = DefaultLeaseTTL
	}
	if c.failWindow == 0 {
		c.failWindow = DefaultFailureWindow
	}
	if c.timeout == 0 {
		c.timeout = DefaultTimeout
	}
	interval, downAfter, retention := opts.HeartbeatInterval, opts.DownAfter, opts.BulkRetention
	if interval == 0 {
		interval = DefaultHeartbeatInterval
	}
	if downAfter == 0 {
		downAfter = max(DefaultDownAfter, 4*interval)
	}
	if retention == 0 {
		retention = DefaultBulkRetention
	}
	switch {
	case c.leaseTTL < minLeaseTTL || c.leaseTTL > maxLeaseTTL:
		return nil, &flightcache.ConfigError{Field: "LeaseTTL", Reason: "must be between 100ms and 1m, got " + c.leaseTTL.String()}
	case c.failWindow < time.Millisecond || c.failWindow > time.Minute:
		return nil, &flightcache.ConfigError{Field: "FailureWindow", Reason: "must be between 1ms and 1m, got " + c.failWindow.String()}
	case c.timeout < time.Millisecond || c.timeout > 10*time.Second:
		return nil, &flightcache.ConfigError{Field: "Timeout", Reason: "must be between 1ms and 10s, got " + c.timeout.String()}
	case interval < minHeartbeatInterval || interval > maxHeartbeatInterval:
		return nil, &flightcache.ConfigError{Field: "HeartbeatInterval", Reason: "must be between 10ms and 10s, got " + interval.String()}
	case downAfter < 2*interval || downAfter > maxDownAfter:
		return nil, &flightcache.ConfigError{Field: "DownAfter", Reason: "must be between twice HeartbeatInterval (" + (2 * interval).String() + ") and 1m, got " + downAfter.String()}
	case retention < minBulkRetention || retention > MaxBulkRetention:
		return nil, &flightcache.ConfigError{Field: "BulkRetention", Reason: "must be between 1m and 720h (and cover the Caches' TTL plus StaleFor), got " + retention.String()}
	}
	c.bus = newBus(c, interval, downAfter, retention)
	c.cluster, _ = client.(*redis.ClusterClient)
	pctx, cancel := startContext(ctx)
	defer cancel()
	var err error
	if c.cluster != nil {
		err = c.cluster.ForEachMaster(pctx, func(ctx context.Context, m *redis.Client) error {
			if err := redisstore.CheckClient(m); err != nil {
				return err
			}
			return m.Ping(ctx).Err()
		})
	} else {
		err = client.Ping(pctx).Err()
	}
	if errors.Is(err, redisstore.ErrClientSideCaching) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%w: cluster coalescing was asked for, but PING failed (ask for process-local coalescing explicitly if that is what you want): %w", ErrUnreachable, err)
	}
	if err := c.checkPermissions(pctx); err != nil {
		return nil, err
	}
	return c, nil
}

// startTimeout bounds New's checks when ctx has no deadline of its own.
// They run once, at start, over fresh connections: held to the per-call
// Options.Timeout, a host busy starting many processes at once would fail
// them for want of a few hundred milliseconds.
const startTimeout = 5 * time.Second

// startContext is ctx, bounded by startTimeout unless it has a deadline.
func startContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, startTimeout)
}

// probeScript deletes a key nothing else uses: a script that writes a key
// under the prefix, as the lease scripts do.
var probeScript = redis.NewScript(`return redis.call('DEL', KEYS[1])`)

// checkPermissions tries, on names under the store's prefix that nothing
// else uses, each kind of command the Coordinator sends: a script that
// writes a key, a publish and a subscribe. A refusal (NOPERM, an unknown
// or disabled command) is an error matching ErrNoPermission; any other
// failure is returned as it is.
func (c *Coordinator) checkPermissions(ctx context.Context) error {
	probe := c.store.Prefix() + "{bus}|probe"
	refused := func(what string, err error) error {
		if err == nil {
			return nil
		}
		if redis.HasErrorPrefix(err, "NOPERM") || redis.HasErrorPrefix(err, "ERR unknown command") {
			prefix := c.store.Prefix()
			return fmt.Errorf("%w: %s %q was refused (%w); grant the user the keys and channels under the prefix, e.g. ACL SETUSER <user> ~%s* &%s* +@all", ErrNoPermission, what, probe, err, prefix, prefix)
		}
		return fmt.Errorf("redislease: %s %q: %w", what, probe, err)
	}
	if err := probeScript.Run(ctx, c.client, []string{probe}).Err(); err != nil {
		return refused("a script on the key", err)
	}
	if err := c.publishTo(ctx, probe, nil); err != nil {
		return refused("a publish on the channel", err)
	}
	var ps *redis.PubSub
	if c.cluster != nil {
		ps = c.cluster.SSubscribe(ctx, probe)
	} else {
		ps = c.client.Subscribe(ctx, probe)
	}
	defer ps.Close()
	_, err := ps.Receive(ctx)
	return refused("a subscribe to the channel", err)
}

// ClaimReads reports whether a flightcache.Cache should leave the shared
// read of a Get that missed its local tier to its flight's first Claim:
// Options.ReadInClaim, false by default. Claim honours
// driver.ClaimRequest.Read either way (it reads the store's entry in the
// same script as each decision); the Cache asks at New. With it, the
// first Claim is a look (driver.ClaimRequest.Wait 0) that reads the entry
// first: a warm shared hit is one script, a cold miss two round trips (the
// look that takes the lease, and Complete). Without it, a warm shared hit
// is one GET and a cold miss three round trips (the GET, the claim,
// Complete).
func (c *Coordinator) ClaimReads() bool { return c.readClaim }

// LeaseTTL returns the lease TTL in use.
func (c *Coordinator) LeaseTTL() time.Duration { return c.leaseTTL }

// Close ends the bus's subscriptions (no handler is called once it
// returned) and the lease subscriptions. Leases still held are not
// released; they expire. Close is idempotent.
func (c *Coordinator) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.bus.close()
	c.mu.Lock()
	subs := c.subs
	c.subs = nil
	c.mu.Unlock()
	var errs []error
	for _, s := range subs {
		errs = append(errs, s.close())
	}
	return errors.Join(errs...)
}

// keys are the Redis names of one cache key. All extend the store's name
// for the key, which begins with its hash tag, so all map to one slot.
type keys struct {
	key                                      string // the cache key
	value, lease, token, done, fail, channel string
}

func (c *Coordinator) keysFor(key string) (keys, error) {
	rk, err := c.store.RedisKey(key)
	if err != nil {
		return keys{}, err
	}
	return keys{key: key, value: rk, lease: rk + "|lease", token: rk + "|token", done: rk + "|done", fail: rk + "|fail", channel: rk + "|ch"}, nil
}

// scriptKeys lists the keys each script touches, for tests that check
// they share one slot.
func (k keys) all() []string {
	return []string{k.value, k.lease, k.token, k.done, k.fail, k.channel}
}

func (c *Coordinator) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// acquireReply is acquireScript's answer.
type acquireReply struct {
	kind    int64 // 0 leader, 1 held by another, 2 done, 3 failed, 4 value present (read)
	token   uint64
	pttl    time.Duration
	msg     string // a failure marker's class (see failureClass)
	payload []byte // the value key's payload, for kinds 2 and 4 when read
	hasVal  bool   // payload was in the reply
}

// The acquire script's read modes (its ARGV[3]).
const (
	noRead    = "0" // decide without reading the value key
	readAlong = "1" // read-or-claim: the value key read with each decision
	readFirst = "2" // a look (ClaimRequest.Wait 0): the value key first
)

func (c *Coordinator) acquire(ctx context.Context, k keys, after uint64, readArg string) (acquireReply, error) {
	v, err := c.runScript(ctx, acquireScript, []string{k.lease, k.token, k.done, k.fail, k.value},
		ms(c.leaseTTL), strconv.FormatUint(after, 10), readArg, c.store.MaxPayload()).Slice()
	if err != nil {
		return acquireReply{}, fmt.Errorf("redislease: acquire: %w", err)
	}
	var r acquireReply
	if len(v) < 2 {
		return r, errors.New("redislease: acquire: malformed reply")
	}
	r.kind, _ = v[0].(int64)
	s, _ := v[1].(string)
	switch r.kind {
	case 3:
		tok, msg, _ := strings.Cut(s, " ")
		s, r.msg = tok, msg
	case 4:
		if len(v) < 3 {
			return r, errors.New("redislease: acquire: malformed reply")
		}
		p, _ := v[2].(string)
		r.payload, r.hasVal = []byte(p), true
		return r, nil
	}
	if r.token, err = strconv.ParseUint(s, 10, 64); err != nil {
		return r, fmt.Errorf("redislease: acquire: malformed token: %w", err)
	}
	switch {
	case r.kind == 1 && len(v) >= 3:
		p, _ := v[2].(int64)
		r.pttl = time.Duration(max(p, 0)) * time.Millisecond
	case r.kind == 2 && len(v) >= 3:
		p, _ := v[2].(string)
		r.payload, r.hasVal = []byte(p), true
	}
	return r, nil
}

// current opens a payload the acquire script read, through the store's
// own checks (its key hash, its MAC, its times) as a Get would. ok is false
// when the payload fails them: the Cache must then read the tier itself,
// and learns why.
func (c *Coordinator) current(k keys, r acquireReply) (e *driver.Entry, ok bool) {
	if !r.hasVal {
		return nil, true
	}
	cur, found, err := c.store.OpenEnvelope(k.key, r.payload)
	if err != nil {
		return nil, false
	}
	if !found {
		return nil, true
	}
	return &cur, true
}

// Claim implements driver.Coordinator. A follower subscribes to the
// key's channel before it looks at the lease a second time, so a completion
// between the two cannot be missed; any message, or a safety-net timer
// (jittered, doubling from 50ms to 1s, and due just after the lease's
// expiry), makes it look again with one script, which also takes the lease
// over when it expired without a result. When the server ends the
// subscription (a Redis Cluster moved the key's slot to another master),
// the follower looks again at once and subscribes anew, on the new master.
func (c *Coordinator) Claim(ctx context.Context, key string, req driver.ClaimRequest) (driver.Grant, error) {
	k, err := c.keysFor(key)
	if err != nil {
		return driver.Grant{}, err
	}
	start := time.Now()
	deadline := start.Add(req.Wait)
	var (
		w        *waiter
		resub    bool   // the server ended w's subscription (see below)
		followed bool   // a look found another instance's lease (Grant.Waited)
		observed uint64 // the token of the lease this follower waits on
		backoff  = minRecheck
		timer    *time.Timer
	)
	defer func() {
		if w != nil {
			w.release()
		}
		if timer != nil {
			timer.Stop()
		}
	}()
	read := req.Read
	for {
		mode := noRead
		switch {
		case read && req.Wait <= 0:
			mode = readFirst
		case read:
			mode = readAlong
		}
		r, err := c.acquire(ctx, k, req.After, mode)
		if err != nil {
			return driver.Grant{Waited: time.Since(start)}, err
		}
		switch r.kind {
		case 0:
			l := c.startLease(k, r.token, observed != 0)
			return driver.Grant{Lease: l, Read: read, Waited: time.Since(start)}, nil
		case 2:
			g := driver.Grant{Done: r.token}
			if followed {
				g.Waited = time.Since(start)
			}
			if read {
				g.Current, g.Read = c.current(k, r)
			}
			return g, nil
		case 3:
			return driver.Grant{Waited: time.Since(start)}, leaderFailed(r.msg)
		case 4:
			cur, ok := c.current(k, r)
			if ok && cur != nil {
				return driver.Grant{Read: true, Current: cur, Waited: time.Since(start)}, nil
			}
			// A payload the store refuses (expired since, corrupt, another
			// key's) is no answer: look again without reading, which
			// claims or waits, and the Cache reads the tier itself.
			read = false
			continue
		}
		if req.Wait <= 0 {
			// A look (see driver.ClaimRequest.Wait): no subscription, no
			// wait.
			return driver.Grant{}, flightcache.ErrCoalesceTimeout
		}
		// Another instance holds the lease: a completion from now on is
		// one this Claim waited for.
		followed = true
		if w == nil {
			nw, err := c.subscribe(ctx, k.channel)
			if err == nil {
				w = nw
				continue // look again: from now on no broadcast is missed
			}
			if !resub {
				return driver.Grant{Waited: time.Since(start)}, err
			}
			// Subscribing again after the server ended the subscription
			// (a Cluster moved the key's slot) can fail while this
			// client's view of the slots is out of date: this round waits
			// for the re-check alone, and the next one tries again.
		}
		observed = r.token
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return driver.Grant{Waited: time.Since(start)}, flightcache.ErrCoalesceTimeout
		}
		// Jitter in [backoff/2, backoff): followers on many instances do
		// not look in step.
		d := backoff/2 + rand.N(backoff/2)
		d = min(d, r.pttl+expiryGrace, remaining)
		backoff = min(backoff*2, maxRecheck)
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		var wake <-chan struct{} // nil while not subscribed: the re-check alone
		if w != nil {
			wake = w.ch
		}
		select {
		case <-wake:
			timer.Stop()
			if w.isLost() {
				// The channel's slot moved: messages are published on its
				// new master now. Look again, then subscribe there.
				w, resub = nil, true
			}
		case <-timer.C:
		case <-ctx.Done():
			return driver.Grant{Waited: time.Since(start)}, ctx.Err()
		}
	}
}

// Invalidate implements driver.Coordinator: a new token that no lease
// holds fences every load of key in flight, and the key's completion and
// failure markers are forgotten.
func (c *Coordinator) Invalidate(ctx context.Context, key string) error {
	k, err := c.keysFor(key)
	if err != nil {
		return err
	}
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	if err := invalidateScript.Run(ctx, c.client, []string{k.token, k.done, k.fail}, ms(c.leaseTTL)).Err(); err != nil {
		return fmt.Errorf("redislease: invalidate: %w", err)
	}
	return nil
}

// sharded is the complete and fail scripts' SPUBLISH flag (publishLua):
// "1" on a Redis Cluster, where a key's followers subscribe with
// SSUBSCRIBE on its master.
func (c *Coordinator) sharded() string {
	if c.cluster != nil {
		return "1"
	}
	return "0"
}

// Token returns the current fencing token of key (0 when none was ever
// issued or it expired), for operators and tests.
func (c *Coordinator) Token(ctx context.Context, key string) (uint64, error) {
	k, err := c.keysFor(key)
	if err != nil {
		return 0, err
	}
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	s, err := c.client.Get(ctx, k.token).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redislease: token: %w", err)
	}
	return strconv.ParseUint(s, 10, 64)
}
