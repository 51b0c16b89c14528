package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/breaker"
	"github.com/flightcache/flightcache/clock"
	"github.com/flightcache/flightcache/cmd/internal/product"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/memstore"
	"github.com/flightcache/flightcache/redislease"
	"github.com/flightcache/flightcache/redisstore"
	"github.com/redis/go-redis/v9"
)

// Modes a run tests, each in a phase of its own on a fresh Redis.
const (
	// ModeCluster: every instance has a Coordinator (cluster-wide
	// coalescing, fenced writes) and the Bus.
	ModeCluster = "cluster"
	// ModeLocal: the Bus, but no Coordinator: loads are coalesced within
	// each instance and write back unfenced.
	ModeLocal = "local"
	// ModeNoBus: neither: each instance learns of another's write only
	// when its copy expires. Other instances' reads are bounded by the TTL
	// only, but monotonic reads and read-your-writes still hold.
	ModeNoBus = "nobus"
)

// Modes lists the modes a run tests by default, in order: the in-process
// ones, then ModeProductd.
var Modes = []string{ModeCluster, ModeLocal, ModeNoBus, ModeProductd}

// The options every instance runs with. The Bounds follow from them
// (BoundsFor); they are short so that a fault's effects, and their end,
// fit in a run of a minute.
const (
	heartbeat     = 100 * time.Millisecond // redislease HeartbeatInterval
	downAfter     = 400 * time.Millisecond // redislease DownAfter
	busDownTTL    = 500 * time.Millisecond // Options.BusDownTTL
	sharedTimeout = 200 * time.Millisecond // Options.SharedTimeout, and redisstore's Timeout
	redisTimeout  = 200 * time.Millisecond // redislease Timeout
	leaseTTL      = 600 * time.Millisecond // redislease LeaseTTL
	loaderTimeout = time.Second            // Options.LoaderTimeout
	coalesceWait  = time.Second            // Options.CoalesceWait (cluster mode)
	cacheTTL      = 2 * time.Second        // Options.TTL: long next to the bounds, short enough for copies to expire
	// breakerCoolDown is the shared tier's breaker's CoolDown, shortened
	// from the default 5s so that a fault's after-effects end before the
	// next fault, a few seconds later. It is not part of any bound: a
	// write is promised to reach the others whatever the breaker does.
	breakerCoolDown = time.Second
	// deliveryBound is one pub/sub delivery on loopback.
	deliveryBound = 50 * time.Millisecond
	// Slack is added to every bound: a busy 2-core machine (under -race)
	// delays goroutines, timers and Redis by this much at times.
	Slack = 250 * time.Millisecond
)

// Plus returns b with d added to every time bound.
func (b Bounds) Plus(d time.Duration) Bounds {
	b.Delivery += d
	b.BusDown += d
	b.Recovery += d
	b.Read += d
	b.Write += d
	return b
}

// BoundsFor derives the Bounds of mode from the options above.
func BoundsFor(mode string) Bounds {
	busDown := max(heartbeat+downAfter, busDownTTL)
	if mode == ModeNoBus {
		// Nothing tells the others: a copy read just before the write
		// lives for the TTL, after a load of up to LoaderTimeout.
		busDown = cacheTTL + loaderTimeout
	}
	b := Bounds{
		Delivery: deliveryBound + Slack,
		BusDown:  busDown + Slack,
		// The bus comes back at the first heartbeat echoed after the
		// fault: one interval after the bus-down bound.
		Recovery: busDown + heartbeat + Slack,
		// A Get: its shared read, then the flight's hard timeout
		// (LoaderTimeout + SharedTimeout + 10ms, plus CoalesceWait +
		// 2×SharedTimeout with a Coordinator).
		Read: sharedTimeout + loaderTimeout + sharedTimeout + 10*time.Millisecond + Slack,
		// A write: the local write may wait for a write-back's shared write
		// of the key (SharedTimeout), then its own shared write and its
		// publish (SharedTimeout each), and with a Coordinator a new
		// fencing token first.
		Write:   3*sharedTimeout + Slack,
		Fencing: mode == ModeCluster,
	}
	if mode == ModeNoBus {
		b.Delivery = b.BusDown
	}
	if mode == ModeCluster || mode == ModeProductd {
		b.Read += coalesceWait + 2*sharedTimeout
		b.Write += redisTimeout
	}
	if mode == ModeProductd {
		// A PUT: the origin's UPDATE, then the product's and the list's
		// tag invalidations (a publish each, SharedTimeout), then the
		// deletes of the keys it supersedes, all within
		// invalidateTimeout, the last one's fence (redisTimeout) and
		// publish (SharedTimeout) past it. A reprice makes the two tag
		// invalidations only. The transaction and HTTP on loopback are
		// within the slack.
		b.Write = 2*sharedTimeout + invalidateTimeout + redisTimeout + sharedTimeout + Slack
		b.Fencing = true
	}
	return b
}

// Config is a run's configuration.
type Config struct {
	// Duration is the whole run, shared equally by the Modes (less those
	// that have their own in ModeDurations).
	Duration time.Duration
	// ModeDurations gives a mode a time of its own within Duration: the
	// other modes share what is left equally.
	ModeDurations map[string]time.Duration
	// Instances per mode. Default 3.
	Instances int
	// Seed orders the faults and drives the workload's choices.
	Seed uint64
	// Modes to run, in order. Default Modes.
	Modes []string
	// Progress, when set, receives a line per phase and per fault.
	Progress io.Writer
	// Recorded, when set, receives each mode's history before it is
	// checked, for a closer look at a violation.
	Recorded func(mode string, ops []Op, faults []Fault)
	// ExtraSlack is added to every bound on top of Slack, for a run that
	// shares the machine with other heavy work: make test runs its short
	// run beside a whole test suite, and another suite may run beside
	// that, which has delayed a bus's heartbeat timer past Slack. The
	// default, 0, holds the promises to Slack alone (make chaos).
	ExtraSlack time.Duration
	// Postgres is the PostgreSQL database (a postgres:// URL) in which the
	// productd mode creates a schema of its own as the instances' origin,
	// and drops it at the end. Default DefaultPostgres; when it does not
	// answer, the origin is a SQLite file instead.
	Postgres string
}

// The workload's shape.
const (
	tenants            = 2
	productsPerTenant  = 3
	readersPerInstance = 2
	// opTimeout is the context of every call: far above the Bounds, so
	// that a call over its bound is seen rather than cut short.
	opTimeout = 10 * time.Second
	// keyPrefix is the shared tier's prefix (on a private server).
	keyPrefix = "chaos:"
)

// Value is what the origin holds and the Caches cache: it embeds its own
// tenant and key, so that a body served under another key is seen.
type Value struct {
	Tenant  string `json:"tenant"`
	Product string `json:"product"`
	Version int64  `json:"version"`
}

// Key is the cache key of v's product.
func (v Value) Key() string { return v.Tenant + ":" + v.Product }

// origin is the shared "database": a version per key, which every write
// bumps. The writes of a key are serialised (a row lock, in a database),
// so the versions a key's writes acknowledge grow.
type origin struct {
	mu       sync.Mutex // guards versions, locks and rng
	versions map[string]int64
	rng      *rand.Rand
	// locks holds a mutex per key, held from the bump to the Cache call's
	// return; a probe key's is made on its first write.
	locks map[string]*sync.Mutex
}

func newOrigin(keys []string, seed uint64) *origin {
	o := &origin{versions: map[string]int64{}, locks: map[string]*sync.Mutex{}, rng: rand.New(rand.NewPCG(seed, 1))}
	for _, k := range keys {
		o.versions[k] = 1
	}
	return o
}

// lock is key's write lock.
func (o *origin) lock(key string) *sync.Mutex {
	o.mu.Lock()
	defer o.mu.Unlock()
	l, ok := o.locks[key]
	if !ok {
		l = new(sync.Mutex)
		o.locks[key] = l
	}
	return l
}

func (o *origin) bump(key string) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.versions[key]++
	return o.versions[key]
}

// load reads key's version, then takes the origin's latency (a few
// milliseconds, a fifth of the time up to 150): the value is as of the
// start of the load, as the Cache assumes, and slow loads write back late.
func (o *origin) load(key string) flightcache.LoadFunc[Value] {
	return func(ctx context.Context) (Value, error) {
		o.mu.Lock()
		version := o.versions[key]
		latency := time.Duration(1+o.rng.IntN(5)) * time.Millisecond
		if o.rng.IntN(5) == 0 {
			latency = time.Duration(50+o.rng.IntN(100)) * time.Millisecond
		}
		o.mu.Unlock()
		flightcache.SetTags(ctx, tagOf(key))
		t := time.NewTimer(latency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return Value{}, ctx.Err()
		}
		return valueOf(key, version), nil
	}
}

// loadMany is load for a batch: every key's version read at the start,
// one latency for the call, and the tags of every key's category on every
// value (SetTags covers a whole call: a value carries more tags than its
// own, so it is invalidated more often, never less).
func (o *origin) loadMany(ctx context.Context, keys []string) (map[string]Value, error) {
	o.mu.Lock()
	versions := make([]int64, len(keys))
	for i, k := range keys {
		versions[i] = o.versions[k]
	}
	latency := time.Duration(1+o.rng.IntN(5)) * time.Millisecond
	if o.rng.IntN(5) == 0 {
		latency = time.Duration(50+o.rng.IntN(100)) * time.Millisecond
	}
	o.mu.Unlock()
	var tags []string
	for _, k := range keys {
		if t := tagOf(k); !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
	}
	flightcache.SetTags(ctx, tags...)
	t := time.NewTimer(latency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	found := make(map[string]Value, len(keys))
	for i, k := range keys {
		found[k] = valueOf(k, versions[i])
	}
	return found, nil
}

// categoryOf is the category of the workload's key "tN:pK": K/2, so that
// products 0 and 1 of a tenant share one, as productd's catalog products
// n and n+8 do (rowMap maps them so).
func categoryOf(key string) string {
	tenant, product, _ := strings.Cut(key, ":")
	n, err := strconv.Atoi(strings.TrimPrefix(product, "p"))
	if err != nil {
		return tenant + "/" + product // a probe's key: a category of its own
	}
	return tenant + "/c" + strconv.Itoa(n/2)
}

// tagOf is the tag of key's category, which the loaders set and WriteTag
// invalidates.
func tagOf(key string) string { return "category:" + categoryOf(key) }

// valueOf is the origin's value of key ("tenant:product") at version.
func valueOf(key string, version int64) Value {
	tenant, product, _ := strings.Cut(key, ":")
	return Value{Tenant: tenant, Product: product, Version: version}
}

// instance is one simulated service instance: its own Redis client,
// tiers, coordinator (nil in local mode) and Cache.
type instance struct {
	id     int
	client *redis.Client
	local  *memstore.Store[Value]
	coord  *redislease.Coordinator
	cache  *flightcache.Cache[Value]
	// slowWrites is FaultSlowWrites' switch for this instance.
	slowWrites atomic.Bool

	// proc is the instance's productd process in ModeProductd, where the
	// fields above are unused.
	proc *process
	// gate keeps the workload off the process while a fault has it down
	// (killed or frozen): every request holds it shared, the fault holds
	// it exclusively (held) from before the process goes down until it is
	// back, so that the requests are the workload's and not the OS's.
	// Only a leader probe's own request, whose load the fault strikes,
	// goes around it.
	gate sync.RWMutex
	held bool // gate is held by the fault goroutine; only it reads and writes held
}

// phase is one mode's part of a run.
type phase struct {
	cfg   Config
	mode  string
	h     *History
	redis *redisServer
	admin *redis.Client
	sw    switches
	org   *origin
	keys  []string
	insts []*instance
	raw   *redisstore.Store // reads the shared tier's entries straight from Redis
	pd    *productdEnv      // ModeProductd's processes and origin; nil in the other modes
	stop  chan struct{}     // closed when the run's time is up
	logMu sync.Mutex        // serialises the probes' and the faults' lines on Progress
}

var discard = slog.New(slog.DiscardHandler)

// Run runs cfg and returns one Report per mode. It starts a private
// redis-server (ErrNoRedisServer without one) and stops it, and everything
// else it started, before it returns. With ModeProductd it first builds
// cmd/productd (ErrNoGo without the go command), and the mode's origin is
// a schema of its own in Config.Postgres. It silences go-redis' own logger
// (a process-wide setting), which would report every failed connection.
// Ending ctx ends the run early; what was recorded is still checked.
func Run(ctx context.Context, cfg Config) ([]Report, error) {
	if cfg.Instances == 0 {
		cfg.Instances = 3
	}
	if len(cfg.Modes) == 0 {
		cfg.Modes = Modes
	}
	if cfg.Duration <= 0 || cfg.Instances < 1 {
		return nil, errors.New("chaos: Duration and Instances must be positive")
	}
	if cfg.Postgres == "" {
		cfg.Postgres = DefaultPostgres
	}
	durations, err := modeDurations(cfg)
	if err != nil {
		return nil, err
	}
	redis.SetLogger(quietRedis{})
	var build *productdBuild
	if slices.Contains(cfg.Modes, ModeProductd) {
		if _, err := exec.LookPath("redis-server"); err != nil {
			return nil, ErrNoRedisServer // before a build for nothing
		}
		// The build runs while the modes before productd's do.
		bctx, cancel := context.WithCancel(ctx)
		build = startBuild(bctx)
		defer func() {
			cancel()
			build.remove()
		}()
	}
	var reports []Report
	for i, mode := range cfg.Modes {
		p := &phase{cfg: cfg, mode: mode}
		if mode == ModeProductd {
			if err := build.wait(); err != nil {
				return reports, err
			}
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "built cmd/productd in %v\n", build.took.Round(time.Millisecond))
			}
			p.pd = &productdEnv{bin: build.bin, writeToken: newWriteToken(), rows: newRowMap()}
		}
		rep, err := p.run(ctx, durations[i], cfg.Seed+uint64(i))
		if err != nil {
			return reports, err
		}
		reports = append(reports, rep)
		if ctx.Err() != nil {
			break
		}
	}
	return reports, nil
}

// modeDurations is how long each of cfg.Modes runs: its ModeDurations
// entry, or an equal share of what the entries leave of Duration.
func modeDurations(cfg Config) ([]time.Duration, error) {
	rest, shared := cfg.Duration, 0
	for _, mode := range cfg.Modes {
		if !slices.Contains(Modes, mode) {
			return nil, fmt.Errorf("chaos: unknown mode %q", mode)
		}
		if d, ok := cfg.ModeDurations[mode]; ok {
			rest -= d
		} else {
			shared++
		}
	}
	for mode, d := range cfg.ModeDurations {
		if !slices.Contains(cfg.Modes, mode) || d <= 0 {
			return nil, fmt.Errorf("chaos: a duration of %v for mode %q, which is not run or not positive", d, mode)
		}
	}
	if shared > 0 && rest <= 0 {
		return nil, fmt.Errorf("chaos: the modes' own durations leave nothing of %v to the others", cfg.Duration)
	}
	out := make([]time.Duration, len(cfg.Modes))
	for i, mode := range cfg.Modes {
		if d, ok := cfg.ModeDurations[mode]; ok {
			out[i] = d
		} else {
			out[i] = rest / time.Duration(shared)
		}
	}
	return out, nil
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func (p *phase) logf(format string, args ...any) {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	if p.cfg.Progress != nil {
		fmt.Fprintf(p.cfg.Progress, "%s: "+format+"\n", append([]any{p.mode}, args...)...)
	}
}

func (p *phase) run(ctx context.Context, d time.Duration, seed uint64) (rep Report, err error) {
	p.redis, err = startRedis(p.cfg.Instances)
	if err != nil {
		return Report{}, err
	}
	defer p.redis.kill()
	p.admin = adminClient(p.redis.addr)
	defer p.admin.Close()
	for t := range tenants {
		for n := range productsPerTenant {
			p.keys = append(p.keys, fmt.Sprintf("t%d:p%d", t, n))
		}
	}
	p.org = newOrigin(p.keys, seed)
	origin := "in memory"
	if p.pd != nil {
		if p.pd.origin, err = openOrigin(ctx, p.cfg.Postgres, chaosCatalog()); err != nil {
			return Report{}, err
		}
		defer func() {
			if cerr := p.pd.origin.cleanup(); cerr != nil && err == nil {
				err = fmt.Errorf("chaos: drop the origin: %w", cerr)
			}
		}()
		origin = p.pd.origin.name
		if p.pd.db, err = product.Open(ctx, p.pd.origin.dsn, product.Options{}); err != nil {
			return Report{}, err
		}
		defer p.pd.db.Close()
		p.pd.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32, IdleConnTimeout: 30 * time.Second}}
		defer p.pd.client.CloseIdleConnections()
	}
	defer p.closeInstances()
	for i := range p.cfg.Instances {
		if err := p.newInstance(ctx, i); err != nil {
			return Report{}, err
		}
	}
	p.waitBusesUp(ctx)
	p.h = NewHistory()
	p.logf("%d instances, %v, seed %d, redis-server at %s, origin %s", len(p.insts), d, seed, p.redis.addr, origin)

	// The raw reads go through a client of their own, as the default
	// user, so that no fault on an instance's user touches them.
	rawClient := redis.NewClient(clientOptions(p.redis.addr))
	defer rawClient.Close()
	p.raw, err = redisstore.New(rawClient, redisstore.Options{Prefix: keyPrefix, Timeout: sharedTimeout, HashTag: true})
	if err != nil {
		return Report{}, err
	}

	order := faultOrder(p.mode, rand.New(rand.NewPCG(seed, 0)))

	p.stop = make(chan struct{})
	stop := p.stop
	var wg sync.WaitGroup
	for _, in := range p.insts {
		if p.pureReader(in) {
			wg.Go(func() { p.reader(stop, in, pureReaderPace, rand.New(rand.NewPCG(seed, uint64(100+in.id*10)))) })
			continue
		}
		for r := range readersPerInstance {
			wg.Go(func() { p.reader(stop, in, readerPace, rand.New(rand.NewPCG(seed, uint64(100+in.id*10+r)))) })
		}
		wg.Go(func() { p.writer(stop, in, rand.New(rand.NewPCG(seed, uint64(200+in.id)))) })
	}
	wg.Go(func() { p.rawReader(stop, rand.New(rand.NewPCG(seed, 300))) })
	faultErr := make(chan error, 1)
	go func() { faultErr <- p.runFaults(stop, order) }()

	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-ctx.Done():
	case err = <-faultErr:
		faultErr <- err
	}
	t.Stop()
	close(stop)
	err = <-faultErr
	wg.Wait()
	if err != nil {
		return Report{}, err
	}
	ops, faults := p.h.Ops(), p.h.Faults()
	if p.cfg.Recorded != nil {
		p.cfg.Recorded(p.mode, ops, faults)
	}
	if err := checkRawReadsFound(p.mode, ops); err != nil {
		return Report{}, err
	}
	return Check(p.mode, ops, faults, BoundsFor(p.mode).Plus(p.cfg.ExtraSlack)), nil
}

// checkRawReadsFound fails a run in which the raw reader, reading for long,
// never found an entry: it reads where it believes the instances write
// (for productd, product.CacheKey), and if that changed, the fencing
// invariant would hold vacuously.
func checkRawReadsFound(mode string, ops []Op) error {
	n := 0
	for _, op := range ops {
		if op.Kind == RawRead {
			if op.Found {
				return nil
			}
			n++
		}
	}
	if n < 200 {
		return nil // too short a run to say
	}
	return fmt.Errorf("chaos: mode %s: none of %d raw reads found an entry in Redis: the raw reader reads other keys than the instances write", mode, n)
}

// clientOptions are productd's request-path settings: a dead or hung
// Redis fails a call within its deadline, never after go-redis' retries.
func clientOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
		PoolTimeout: 500 * time.Millisecond, DialerRetries: 1,
	}
}

// newInstance adds instance id to p.insts, where closeInstances finds
// what it opened even when it fails.
func (p *phase) newInstance(ctx context.Context, id int) error {
	if p.pd != nil {
		return p.newProcess(ctx, id)
	}
	opt := clientOptions(p.redis.addr)
	// go-redis authenticates only when a password is set: without one
	// every instance would be the default user, out of the ACL faults'
	// reach. The users are nopass: any password will do.
	opt.Username, opt.Password = redisUser(id), "chaos"
	in := &instance{id: id, client: redis.NewClient(opt)}
	p.insts = append(p.insts, in)
	store, err := redisstore.New(in.client, redisstore.Options{Prefix: keyPrefix, Timeout: sharedTimeout, HashTag: true})
	if err != nil {
		return err
	}
	in.local, err = memstore.New(memstore.Options[Value]{ClockResolution: clock.DefaultResolution})
	if err != nil {
		return err
	}
	brk, err := breaker.New(breaker.Options{CoolDown: breakerCoolDown})
	if err != nil {
		return err
	}
	opts := flightcache.Options[Value]{
		Name: "chaos", Local: in.local, Shared: slowStore{SharedStore: store, on: &in.slowWrites},
		Codec: &panicCodec{on: &p.sw.codecPanic}, TTL: cacheTTL,
		LoaderTimeout: loaderTimeout, SharedTimeout: sharedTimeout, SharedBreaker: brk,
		Logger: discard,
	}
	if p.mode == ModeNoBus {
		in.cache, err = flightcache.New(opts)
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// New PINGs within redisTimeout: a busy machine may miss that once
	// while the new client dials.
	for {
		in.coord, err = redislease.New(cctx, in.client, store, redislease.Options{
			LeaseTTL: leaseTTL, Timeout: redisTimeout, HeartbeatInterval: heartbeat, DownAfter: downAfter,
		})
		if err == nil || !errors.Is(err, redislease.ErrUnreachable) || cctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return err
	}
	opts.Bus, opts.BusDownTTL = in.coord, busDownTTL
	if p.mode == ModeCluster {
		opts.Coordinator, opts.CoalesceWait = in.coord, coalesceWait
	}
	in.cache, err = flightcache.New(opts)
	return err
}

// closeInstances closes every Cache, then its coordinator, tiers and
// client.
func (p *phase) closeInstances() {
	if p.pd != nil {
		p.terminateProcesses()
		return
	}
	for _, in := range p.insts {
		if in.cache != nil {
			in.cache.Close()
		}
		if in.coord != nil {
			in.coord.Close()
		}
		if in.local != nil {
			in.local.Close()
		}
		in.client.Close()
	}
}

// waitBusesUp waits (up to 10s) until every instance's bus is up, so that
// the run starts from a cluster that hears itself.
func (p *phase) waitBusesUp(ctx context.Context) {
	if p.pd != nil {
		p.waitProcessesReady(ctx)
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		up := 0
		for _, in := range p.insts {
			// A Get subscribes the Bus; the first ones also warm the tiers.
			_, _ = in.cache.Get(ctx, p.keys[0], p.org.load(p.keys[0]))
			if in.cache.BusState() == driver.BusUp {
				up++
			}
		}
		if up == len(p.insts) || p.mode == ModeNoBus {
			return
		}
		time.Sleep(20 * time.Millisecond) // polling the buses coming up
	}
}

// errText is err's message on one line, without a panic's stack.
func errText(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n\ngoroutine ")
	return strings.ReplaceAll(s, "\n", " | ")
}

// call runs f, turning a panic into an error.
func call(f func() error) (err error, panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			err, panicked = fmt.Errorf("panic: %v", r), true
		}
	}()
	return f(), false
}

// pause waits d, or until stop closes; it reports whether to go on.
func pause(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}

// read Fetches key on in (in ModeProductd: GETs its row) and records it.
func (p *phase) read(in *instance, key string) {
	if p.pd != nil {
		p.httpGet(in, key, true)
		return
	}
	p.readWith(in, key, p.org.load(key))
}

// readWith Fetches key on in with load as the loader, and records it.
func (p *phase) readWith(in *instance, key string, load flightcache.LoadFunc[Value]) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	op := Op{Instance: in.id, Key: key, Kind: Read, Start: p.h.Now()}
	var res flightcache.Result[Value]
	err, _ := call(func() (err error) {
		res, err = in.cache.Fetch(ctx, key, load)
		return err
	})
	op.End = p.h.Now()
	op.Detail = res.Outcome.String() + "/" + res.Scope.String()
	if err != nil {
		op.Err = errText(err)
	} else {
		op.Found, op.Version, op.BodyKey = true, res.Value.Version, res.Value.Key()
	}
	p.h.Record(op)
}

// pureReader says whether in only reads: the last instance, when there
// are several. It reads slowly, so that a short Redis outage does not open
// its breaker: it then trusts what Redis holds as soon as it answers
// again, as a quiet instance does.
func (p *phase) pureReader(in *instance) bool { return len(p.insts) > 1 && in.id == len(p.insts)-1 }

// A reader waits between its reads a random time up to its pace.
const (
	readerPace     = 5 * time.Millisecond
	pureReaderPace = 60 * time.Millisecond
	writerPace     = 400 * time.Millisecond
)

// reader Gets random keys, at most pace apart, until stop closes. One
// read in four is a batch (FetchMany; in ModeProductd the batch endpoint)
// of the key and up to three other keys of its tenant.
func (p *phase) reader(stop <-chan struct{}, in *instance, pace time.Duration, rng *rand.Rand) {
	for pause(stop, 1+time.Duration(rng.Int64N(int64(pace)))) {
		key := p.keys[rng.IntN(len(p.keys))]
		if rng.IntN(4) == 0 {
			p.readBatch(in, p.batchOf(key, rng))
			continue
		}
		p.read(in, key)
	}
}

// batchOf is key and up to three other random keys of its tenant.
func (p *phase) batchOf(key string, rng *rand.Rand) []string {
	tenant, _, _ := strings.Cut(key, ":")
	keys := []string{key}
	for range 3 {
		k := p.keys[rng.IntN(len(p.keys))]
		if t, _, _ := strings.Cut(k, ":"); t == tenant && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// readBatch reads keys on in in one batch (in ModeProductd: one GET of
// the batch endpoint) and records one read per key, spanning the batch.
func (p *phase) readBatch(in *instance, keys []string) {
	if p.pd != nil {
		p.httpBatch(in, keys)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	start := p.h.Now()
	var rs []flightcache.KeyResult[Value]
	err, _ := call(func() error {
		rs = in.cache.FetchMany(ctx, keys, p.org.loadMany)
		return nil
	})
	end := p.h.Now()
	for i, k := range keys {
		op := Op{Instance: in.id, Key: k, Kind: Read, Start: start, End: end}
		switch {
		case err != nil:
			op.Err = errText(err)
		case rs[i].Err != nil:
			op.Detail = rs[i].Outcome.String() + "/" + rs[i].Scope.String() + "/batch"
			op.Err = errText(rs[i].Err)
		default:
			op.Detail = rs[i].Outcome.String() + "/" + rs[i].Scope.String() + "/batch"
			op.Found, op.Version, op.BodyKey = true, rs[i].Value.Version, rs[i].Value.Key()
		}
		p.h.Record(op)
	}
}

// writer changes a random key (Set 4 times in 10, Delete 4, the tenant's
// prefix 1, the key's category tag 1: a Delete makes every instance load
// the key again, and half of them are followed by a Set 20-150 ms later)
// every writerPace/4 to writerPace, then reads it back, until stop
// closes. In ModeProductd every write but the tag's is a PUT, and the
// tag's a reprice of the row's category. Writes are rarer than reads, so that a write left undone
// is not soon redone by the writer's next one.
func (p *phase) writer(stop <-chan struct{}, in *instance, rng *rand.Rand) {
	for pause(stop, writerPace/4+time.Duration(rng.Int64N(int64(writerPace*3/4)))) {
		key := p.keys[rng.IntN(len(p.keys))]
		how := WriteSet
		switch n := rng.IntN(10); {
		case n == 0:
			how = WritePrefix
		case n == 1:
			how = WriteTag
		case n < 6:
			how = WriteDelete
		}
		p.write(in, key, how)
		p.read(in, key)
		// A second change soon after a Delete (a user saving twice), while
		// the other instances load the key again, as they do for a hot
		// key: their write-backs, degraded or slowed by a fault, race
		// this Set.
		if how == WriteDelete && rng.IntN(2) == 0 {
			var reloads sync.WaitGroup
			for _, o := range p.insts {
				if o != in && !p.pureReader(o) {
					reloads.Go(func() { p.read(o, key) })
				}
			}
			if pause(stop, time.Duration(20+rng.IntN(130))*time.Millisecond) {
				p.write(in, key, WriteSet)
				p.read(in, key)
			}
			reloads.Wait()
		}
	}
}

// write commits a change of key to the origin and tells in's Cache, as a
// service's PUT does, holding the key's (or for WritePrefix, the tenant's
// keys', for WriteTag, its category's keys') write lock throughout. A Set
// tags the value with its category, as the loaders do. In ModeProductd it
// is a PUT, or for WriteTag a reprice of the row's category.
func (p *phase) write(in *instance, key, how string) {
	if p.pd != nil {
		if how == WriteTag {
			p.httpReprice(in, key)
			return
		}
		p.httpPut(in, key)
		return
	}
	keys := []string{key}
	tenant, _, _ := strings.Cut(key, ":")
	switch how {
	case WritePrefix:
		keys = keys[:0]
		for _, k := range p.keys {
			if strings.HasPrefix(k, tenant+":") {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
	case WriteTag:
		keys = p.categoryKeys(key)
	}
	for _, k := range keys {
		l := p.org.lock(k)
		l.Lock()
		defer l.Unlock()
	}
	versions := make([]int64, len(keys))
	for i, k := range keys {
		versions[i] = p.org.bump(k)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	start := p.h.Now()
	err, panicked := call(func() error {
		switch how {
		case WriteSet:
			return in.cache.Set(flightcache.WithTags(ctx, tagOf(key)), key, valueOf(key, versions[0]))
		case WriteDelete:
			return in.cache.Delete(ctx, key)
		case WriteTag:
			return in.cache.InvalidateTag(ctx, tagOf(key))
		default:
			return in.cache.InvalidatePrefix(ctx, tenant+":")
		}
	})
	end := p.h.Now()
	for i, k := range keys {
		op := Op{Instance: in.id, Key: k, Kind: Write, Write: how, Start: start, End: end, Version: versions[i], Unacked: panicked}
		if err != nil {
			op.Err = errText(err)
		}
		p.h.Record(op)
	}
}

// categoryKeys are the workload's keys in key's category, sorted: the
// order their write locks are taken in.
func (p *phase) categoryKeys(key string) []string {
	var keys []string
	for _, k := range p.keys {
		if categoryOf(k) == categoryOf(key) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// rawReader reads random keys' entries straight from Redis, every 10 ms,
// until stop closes.
func (p *phase) rawReader(stop <-chan struct{}, rng *rand.Rand) {
	for pause(stop, 10*time.Millisecond) {
		p.rawRead(p.keys[rng.IntN(len(p.keys))])
	}
}

// rawRead reads key's entry straight from Redis and records it.
func (p *phase) rawRead(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	op := Op{Instance: -1, Key: key, Kind: RawRead, Start: p.h.Now()}
	if p.pd != nil {
		p.rawReadRow(ctx, key, &op)
		op.End = p.h.Now()
		p.h.Record(op)
		return
	}
	e, ok, err := p.raw.Get(ctx, key)
	op.End = p.h.Now()
	switch {
	case err != nil:
		op.Err = errText(err)
	case ok:
		var v Value
		if err := json.Unmarshal(e.Value, &v); err != nil {
			op.Err = err.Error()
			break
		}
		op.Found, op.Version, op.BodyKey = true, v.Version, v.Key()
	}
	p.h.Record(op)
}
