package redislease

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/leakcheck"
	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/flightcache/flightcache/memstore"
	"github.com/flightcache/flightcache/redisstore"
	"github.com/redis/go-redis/v9"
)

// Every test closes its caches, coordinators and clients, so no heartbeat,
// subscription reader or pool goroutine may outlive the package's tests.
func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// clientOptions are the recommended request-path settings (see the
// redisstore package documentation), so a dead server fails calls fast.
func clientOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		// Generous: the machine running the tests is shared and slow under
		// -race (another test run may be going on beside this one); a dead
		// server still fails at once (connection refused).
		DialTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
		// A herd's 250 Gets per instance queue for 32 connections rather
		// than dial one each: hundreds of dials at once on a loaded machine
		// overflow the listen backlog and fail, which would turn a test of
		// coalescing into one of degradation.
		PoolSize: 32, PoolTimeout: 10 * time.Second,
		// A herd dials hundreds of connections at once; on a loaded
		// machine some dials fail and are retried, rather than turning
		// a coalescing test into a test of degradation.
		DialerRetries: 5, DialerRetryTimeout: 20 * time.Millisecond,
	}
}

// newClient returns a client on addr with hooks, closed when the test
// ends.
func newClient(t testing.TB, addr string, hooks ...redis.Hook) *redis.Client {
	t.Helper()
	c := redis.NewClient(clientOptions(addr))
	for _, h := range hooks {
		c.AddHook(h)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sharedRedis returns the address of the shared test Redis and a key
// prefix of the test's own, whose keys are deleted when the test ends.
func sharedRedis(t testing.TB) (addr, prefix string) {
	t.Helper()
	addr = testenv.RequireRedis(t)
	prefix = testenv.UniqueName("fctest:lease:") + ":"
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return addr, prefix
}

// instance is one simulated service instance: its own client, store,
// coordinator (nil in local mode) and Cache.
type instance struct {
	client redis.UniversalClient
	store  *redisstore.Store
	coord  *Coordinator
	cache  *flightcache.Cache[string]
	rec    *recorder
}

type instanceConfig struct {
	local bool // process-local coalescing: no coordinator
	lease Options
	cache func(*flightcache.Options[string])
}

func newInstance(t testing.TB, client redis.UniversalClient, prefix string, cfg instanceConfig) *instance {
	t.Helper()
	store, err := redisstore.New(client, redisstore.Options{Prefix: prefix, HashTag: true})
	if err != nil {
		t.Fatal(err)
	}
	local, err := memstore.New(memstore.Options[string]{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Close)
	in := &instance{client: client, store: store, rec: newRecorder()}
	opts := flightcache.Options[string]{
		Local: local, Shared: store, TTL: time.Minute, Jitter: flightcache.DisableJitter,
		Observer: in.rec, Logger: quietLogger,
		// The herd's 2,000 concurrent reads on a shared, slow machine
		// under -race, queued for the pool: the default 250ms would time
		// reads out, and a Get whose shared read timed out coalesces
		// within its process only.
		SharedTimeout: 10 * time.Second, // the most New accepts
	}
	if !cfg.local {
		if cfg.lease.Timeout == 0 {
			// The default 250ms is for a production Redis; the shared test
			// machine under -race is far slower, and a call cut short
			// would turn a test of coalescing into one of degradation.
			cfg.lease.Timeout = 10 * time.Second // the most New accepts
		}
		quietBus(&cfg.lease)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		in.coord, err = New(ctx, client, store, cfg.lease)
		if err != nil {
			t.Fatal(err)
		}
		opts.Coordinator = in.coord
	}
	if cfg.cache != nil {
		cfg.cache(&opts)
	}
	in.cache, err = flightcache.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-in first-out: the Cache closes before its
	// coordinator, the coordinator before its client.
	t.Cleanup(func() {
		in.cache.Close()
		if in.coord != nil {
			in.coord.Close()
		}
	})
	return in
}

// quietBus gives a bus that is not under test a DownAfter of a minute: on
// a machine loaded by another test run a heartbeat can take longer than
// the default second to come back, and a bus that goes down drops the
// local tier and the messages in flight, which would turn a test of
// something else into one of the bus-down path. Tests of that path set
// HeartbeatInterval or DownAfter themselves.
func quietBus(o *Options) {
	if o.HeartbeatInterval == 0 && o.DownAfter == 0 {
		o.DownAfter = time.Minute
	}
}

// origin is a loader that counts its calls. Each call returns value, after
// latency; while gate is set, a call waits for it to close first, and
// started receives the call's number when it begins.
type origin struct {
	calls   atomic.Int64
	latency time.Duration
	value   string
	err     error
	gate    chan struct{}
	started chan int64
}

func (o *origin) load(ctx context.Context) (string, error) {
	n := o.calls.Add(1)
	if o.started != nil {
		select {
		case o.started <- n:
		default:
		}
	}
	if o.gate != nil {
		select {
		case <-o.gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if o.latency > 0 {
		// The origin's latency, not synchronisation.
		t := time.NewTimer(o.latency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if o.err != nil {
		return "", o.err
	}
	return o.value, nil
}

// recorder counts a Cache's events by kind.
type recorder struct {
	mu     sync.Mutex
	counts map[driver.EventKind]int
	waits  []time.Duration
	scopes []flightcache.Scope
	errs   []error
}

func newRecorder() *recorder { return &recorder{counts: make(map[driver.EventKind]int)} }

func (r *recorder) ObserveCache(e driver.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[e.Kind]++
	if e.Err != nil {
		r.errs = append(r.errs, e.Err)
	}
	switch e.Kind {
	case driver.EventFollowerWoken:
		r.waits = append(r.waits, e.Duration)
	case driver.EventScopeChanged:
		r.scopes = append(r.scopes, e.Scope)
	}
}

func (r *recorder) count(k driver.EventKind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[k]
}

func (r *recorder) scopeChanges() []flightcache.Scope {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]flightcache.Scope(nil), r.scopes...)
}

// faultHook stands between a client and Redis, for commands and
// pipelines alike: crashed fails every command at once (the instance is
// gone: no heartbeat, no write, no release); paused holds every command
// until resumed or its ctx ends (the process is stopped, as with
// SIGSTOP). followers is signalled each time an acquire answered "held by
// another", so a test knows its followers wait.
type faultHook struct {
	crashed   atomic.Bool
	failGets  atomic.Bool // GET fails, as a read timing out on a thawed host would
	mu        sync.Mutex
	pause     chan struct{} // non-nil while paused; closed by resume
	following chan struct{}
}

var (
	errCrashed    = errors.New("injected: instance crashed")
	errReadFailed = errors.New("injected: GET timed out")
)

// gate is the fault cmd meets, nil when none: it fails at once when the
// instance crashed or cmd is a GET while failGets is set, and waits while
// paused.
func (h *faultHook) gate(ctx context.Context, cmd redis.Cmder) error {
	if h.crashed.Load() {
		return errCrashed
	}
	if h.failGets.Load() && (cmd.Name() == "getrange" || cmd.Name() == "get") {
		return errReadFailed
	}
	h.mu.Lock()
	p := h.pause
	h.mu.Unlock()
	if p != nil {
		select {
		case <-p:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// followed signals h.following when cmd is an acquire that answered "held
// by another".
func (h *faultHook) followed(cmd redis.Cmder) {
	if h.following == nil || (cmd.Name() != "evalsha" && cmd.Name() != "eval") {
		return
	}
	if c, ok := cmd.(*redis.Cmd); ok {
		if v, err := c.Slice(); err == nil && len(v) >= 3 && v[0] == int64(1) {
			select {
			case h.following <- struct{}{}:
			default:
			}
		}
	}
}

func (h *faultHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *faultHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.gate(ctx, cmd); err != nil {
			cmd.SetErr(err)
			return err
		}
		err := next(ctx, cmd)
		h.followed(cmd)
		return err
	}
}
func (h *faultHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if err := h.gate(ctx, cmd); err != nil {
				// One fault fails the whole pipeline, as a dead or
				// stopped server would.
				for _, c := range cmds {
					c.SetErr(err)
				}
				return err
			}
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.followed(cmd)
		}
		return err
	}
}

func (h *faultHook) pauseNow() {
	h.mu.Lock()
	h.pause = make(chan struct{})
	h.mu.Unlock()
}

func (h *faultHook) resume() {
	h.mu.Lock()
	close(h.pause)
	h.pause = nil
	h.mu.Unlock()
}

// getResult is one Get's answer.
type getResult struct {
	r   flightcache.Result[string]
	err error
	at  time.Time
}

// fetchAsync runs Fetch in a goroutine and delivers its answer on the
// returned channel.
func fetchAsync(ctx context.Context, c *flightcache.Cache[string], key string, load flightcache.LoadFunc[string]) <-chan getResult {
	ch := make(chan getResult, 1)
	go func() {
		r, err := c.Fetch(ctx, key, load)
		ch <- getResult{r: r, err: err, at: time.Now()}
	}()
	return ch
}

// await returns the answer of a Get, failing the test if it takes longer
// than within: nothing may hang.
func await(t testing.TB, ch <-chan getResult, within time.Duration) getResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(within):
		t.Fatalf("a Get did not return within %v", within)
		return getResult{}
	}
}
