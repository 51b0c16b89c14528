package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/redis/go-redis/v9"
)

// liveEntry is an entry that stays in Redis for the duration of a test.
func liveEntry(value string) driver.Entry {
	now := time.Now()
	return driver.Entry{Value: []byte(value), Meta: driver.Meta{
		FreshUntil:   now.Add(time.Minute),
		StaleUntil:   now.Add(time.Hour),
		LoadDuration: 17 * time.Millisecond,
	}}
}

func TestSetGetRoundTripsEveryMetaFieldThroughRedis(t *testing.T) {
	s, _ := newTestStore(t, Options{})
	ctx := context.Background()
	tomb := liveEntry("")
	tomb.Value, tomb.NotFound = nil, true
	for name, e := range map[string]driver.Entry{"value": liveEntry(`{"id":1}`), "tombstone": tomb} {
		t.Run(name, func(t *testing.T) {
			if err := s.Set(ctx, name, e); err != nil {
				t.Fatalf("Set: %v", err)
			}
			got, ok, err := s.Get(ctx, name)
			if err != nil || !ok {
				t.Fatalf("Get = %v, %v", ok, err)
			}
			if !sameEntry(got, e) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, e)
			}
		})
	}
}

func TestGetOfMissingKeyIsMissWithoutError(t *testing.T) {
	s, _ := newTestStore(t, Options{})
	got, ok, err := s.Get(context.Background(), "absent")
	if ok || err != nil || !sameEntry(got, driver.Entry{}) {
		t.Fatalf("Get = %+v, %v, %v; want zero, false, nil", got, ok, err)
	}
}

func TestSetGivesKeyTTLUntilStaleUntil(t *testing.T) {
	s, c := newTestStore(t, Options{})
	ctx := context.Background()
	e := liveEntry("v")
	e.StaleUntil = time.Now().Add(90 * time.Second)
	// Measured before Set, whose PX can only be shorter, so that it bounds
	// the answer from above however the SET and the PTTL are delayed on
	// the way; Redis counts in whole milliseconds, hence the 1ms of slack.
	left := time.Until(e.StaleUntil)
	if err := s.Set(ctx, "k", e); err != nil {
		t.Fatal(err)
	}
	pttl, err := c.PTTL(ctx, s.Prefix()+"k").Result()
	if err != nil {
		t.Fatal(err)
	}
	if pttl > left+time.Millisecond || pttl < left-5*time.Second {
		t.Fatalf("PTTL = %v; want just under %v (never past StaleUntil)", pttl, left)
	}
}

func TestSetOfExpiredEntryDeletesKey(t *testing.T) {
	s, c := newTestStore(t, Options{})
	ctx := context.Background()
	if err := s.Set(ctx, "k", liveEntry("old")); err != nil {
		t.Fatal(err)
	}
	e := liveEntry("new")
	e.FreshUntil = time.Now().Add(-2 * time.Second)
	e.StaleUntil = time.Now().Add(-time.Second)
	if err := s.Set(ctx, "k", e); err != nil {
		t.Fatalf("Set of expired entry: %v", err)
	}
	if n := c.Exists(ctx, s.Prefix()+"k").Val(); n != 0 {
		t.Fatal("key still exists after Set of an expired entry")
	}
}

// An entry Redis still holds but whose StaleUntil has passed on this host's
// clock (writer clock skew) is a miss, not a value.
func TestGetTreatsEntryPastStaleUntilAsMiss(t *testing.T) {
	s, c := newTestStore(t, Options{})
	ctx := context.Background()
	e := liveEntry("v")
	e.FreshUntil = time.Now().Add(-2 * time.Second)
	e.StaleUntil = time.Now().Add(-time.Second)
	payload, err := Encode(s.Prefix()+"k", e)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, s.Prefix()+"k", payload, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.Get(ctx, "k"); ok || err != nil {
		t.Fatalf("Get = %+v, %v, %v; want miss", got, ok, err)
	}
}

func TestDeleteRemovesKeyAndToleratesMissingKey(t *testing.T) {
	s, _ := newTestStore(t, Options{})
	ctx := context.Background()
	if err := s.Set(ctx, "k", liveEntry("v")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Get(ctx, "k"); ok || err != nil {
		t.Fatalf("Get after Delete = %v, %v", ok, err)
	}
	if err := s.Delete(ctx, "k"); err != nil {
		t.Fatalf("Delete of missing key: %v", err)
	}
}

func TestOversizedPayloadIsRejectedAndNothingIsSent(t *testing.T) {
	counter := &commandCounter{}
	s, c := newTestStore(t, Options{MaxPayload: 128}, counter)
	ctx := context.Background()
	counter.reset()
	err := s.Set(ctx, "big", liveEntry(strings.Repeat("x", 200)))
	var pe *PayloadTooLargeError
	if !errors.Is(err, ErrPayloadTooLarge) || !errors.As(err, &pe) {
		t.Fatalf("Set = %v; want *PayloadTooLargeError", err)
	}
	if pe.Max != 128 || pe.Size <= 200 || pe.KeyHandle != keyHandle(s.Prefix()+"big") {
		t.Fatalf("error = %+v; want the handle of key big, Size > 200, Max 128", pe)
	}
	if cmds := counter.names(); len(cmds) != 0 {
		t.Fatalf("oversized Set sent %v to Redis", cmds)
	}
	if n := c.Exists(ctx, s.Prefix()+"big").Val(); n != 0 {
		t.Fatal("oversized value was stored")
	}
	// The limit is on the envelope, so a value that fits is stored.
	if err := s.Set(ctx, "small", liveEntry(strings.Repeat("x", 64))); err != nil {
		t.Fatalf("Set of a value under the limit: %v", err)
	}
}

func TestCorruptPayloadIsReportedAsTypedError(t *testing.T) {
	s, c := newTestStore(t, Options{})
	ctx := context.Background()
	for name, raw := range map[string]string{
		"foreign JSON": `{"name":"Ada"}`,
		"truncated": func() string {
			b, _ := Encode(s.Prefix()+"truncated", liveEntry("value"))
			return string(b[:len(b)-3])
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			key := strings.ReplaceAll(name, " ", "-")
			if err := c.Set(ctx, s.Prefix()+key, raw, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			got, ok, err := s.Get(ctx, key)
			var ce *CorruptError
			if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) || ce.KeyHandle != keyHandle(s.Prefix()+key) {
				t.Fatalf("Get = %v; want *CorruptError with the handle of key %q", err, key)
			}
			if ok || !sameEntry(got, driver.Entry{}) {
				t.Fatalf("Get returned %+v, %v with a corrupt payload", got, ok)
			}
		})
	}
}

func TestInvalidKeyIsRejectedBeforeRedis(t *testing.T) {
	counter := &commandCounter{}
	s, _ := newTestStore(t, Options{}, counter)
	ctx := context.Background()
	long := strings.Repeat("k", MaxKeyLen-len(s.Prefix())+1)
	for name, key := range map[string]string{"empty": "", "too long with prefix": long} {
		t.Run(name, func(t *testing.T) {
			counter.reset()
			_, _, getErr := s.Get(ctx, key)
			setErr := s.Set(ctx, key, liveEntry("v"))
			delErr := s.Delete(ctx, key)
			for op, err := range map[string]error{"Get": getErr, "Set": setErr, "Delete": delErr} {
				var ke *flightcache.KeyError
				if !errors.Is(err, flightcache.ErrInvalidKey) || !errors.As(err, &ke) {
					t.Errorf("%s = %v; want *flightcache.KeyError", op, err)
				}
			}
			if cmds := counter.names(); len(cmds) != 0 {
				t.Errorf("invalid key reached Redis: %v", cmds)
			}
		})
	}
	// The longest valid key is accepted.
	if err := s.Set(ctx, long[1:], liveEntry("v")); err != nil {
		t.Fatalf("Set of a key of exactly MaxKeyLen: %v", err)
	}
}

func TestSetRejectsInvalidMetaBeforeRedis(t *testing.T) {
	s, _ := newTestStore(t, Options{})
	e := liveEntry("v")
	e.FreshUntil = e.StaleUntil.Add(time.Second)
	if err := s.Set(context.Background(), "k", e); !errors.Is(err, ErrInvalidEntry) {
		t.Fatalf("Set = %v; want ErrInvalidEntry", err)
	}
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redisAddr}) // never used: New does no I/O
	defer c.Close()
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		opts   Options
		field  string
	}{
		{"nil client", nil, Options{}, "client"},
		{"negative MaxPayload", c, Options{MaxPayload: -1}, "MaxPayload"},
		{"MaxPayload above Redis limit", c, Options{MaxPayload: 513 << 20}, "MaxPayload"},
		{"MaxPayload below smallest envelope", c, Options{MaxPayload: 3}, "MaxPayload"},
		{"negative Timeout", c, Options{Timeout: -time.Second}, "Timeout"},
		{"prefix too long", c, Options{Prefix: strings.Repeat("p", MaxKeyLen)}, "Prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.client, tc.opts)
			var ce *flightcache.ConfigError
			if s != nil || !errors.Is(err, flightcache.ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("New = %v, %v; want *ConfigError for %s", s, err, tc.field)
			}
		})
	}
	s, err := New(c, Options{})
	if err != nil || s.Prefix() != DefaultPrefix || s.maxPayload != DefaultMaxPayload {
		t.Fatalf("zero Options: %v, prefix %q, max %d", err, s.Prefix(), s.maxPayload)
	}
}

// commandCounter is a redis.Hook that records every command the client
// sends, so a test can prove how many round trips an operation costs.
type commandCounter struct {
	mu        sync.Mutex
	cmds      []string
	pipelines int
}

func (h *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.cmds = append(h.cmds, cmd.Name())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		h.pipelines++
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (h *commandCounter) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cmds, h.pipelines = nil, 0
}

func (h *commandCounter) names() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pipelines > 0 {
		return append(append([]string(nil), h.cmds...), fmt.Sprintf("%d pipeline(s)", h.pipelines))
	}
	return append([]string(nil), h.cmds...)
}

func TestEachOperationIsExactlyOneCommand(t *testing.T) {
	counter := &commandCounter{}
	s, _ := newTestStore(t, Options{}, counter)
	ctx := context.Background()
	past := liveEntry("v")
	past.FreshUntil, past.StaleUntil = time.Now().Add(-time.Minute), time.Now().Add(-time.Second)
	for _, tc := range []struct {
		name string
		op   func() error
		want string
	}{
		{"Set", func() error { return s.Set(ctx, "k", liveEntry("v")) }, "set"},
		{"Get hit", func() error { _, _, err := s.Get(ctx, "k"); return err }, "getrange"},
		{"Delete", func() error { return s.Delete(ctx, "k") }, "del"},
		{"Get miss", func() error { _, _, err := s.Get(ctx, "k"); return err }, "getrange"},
		{"Set expired", func() error { return s.Set(ctx, "k", past) }, "del"},
	} {
		counter.reset()
		if err := tc.op(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := counter.names(); len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s sent %v; want exactly [%s]", tc.name, got, tc.want)
		}
	}
}

var errInjected = errors.New("injected fault")

// faultHook fails the real client's reads (GETRANGE, GET, MGET), writes (SET, DEL) or dials,
// as set by the test, and passes everything else through.
type faultHook struct {
	mu                              sync.Mutex
	failReads, failWrites, failDial bool
}

func (h *faultHook) set(reads, writes, dial bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failReads, h.failWrites, h.failDial = reads, writes, dial
}

func (h *faultHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.mu.Lock()
		fail := h.failDial
		h.mu.Unlock()
		if fail {
			return nil, errInjected
		}
		return next(ctx, network, addr)
	}
}

func (h *faultHook) fails(cmd redis.Cmder) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return (h.failReads && (cmd.Name() == "getrange" || cmd.Name() == "get" || cmd.Name() == "mget")) || (h.failWrites && (cmd.Name() == "set" || cmd.Name() == "del"))
}

func (h *faultHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.fails(cmd) {
			cmd.SetErr(errInjected)
			return errInjected
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook fails a whole pipeline, as a lost round trip would,
// when one of its commands is to fail.
func (h *faultHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if h.fails(c) {
				for _, c := range cmds {
					c.SetErr(errInjected)
				}
				return errInjected
			}
		}
		return next(ctx, cmds)
	}
}

func TestInjectedFaultsSurfaceAsErrorsAndRecover(t *testing.T) {
	faults := &faultHook{}
	s, _ := newTestStore(t, Options{}, faults)
	ctx := context.Background()
	if err := s.Set(ctx, "k", liveEntry("v")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name                     string
		reads, writes            bool
		wantGetErr, wantWriteErr bool
	}{
		{"reads fail", true, false, true, false},
		{"writes fail", false, true, false, true},
		{"both fail", true, true, true, true},
		{"healed", false, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			faults.set(tc.reads, tc.writes, false)
			defer faults.set(false, false, false)

			got, ok, err := s.Get(ctx, "k")
			if tc.wantGetErr {
				if !errors.Is(err, errInjected) || ok {
					t.Errorf("Get = %v, %v; want the injected error and no hit", ok, err)
				}
			} else if err != nil || !ok || string(got.Value) != "v" {
				t.Errorf("Get = %q, %v, %v; want hit", got.Value, ok, err)
			}

			setErr := s.Set(ctx, "k", liveEntry("v"))
			delErr := s.Delete(ctx, "other")
			for op, err := range map[string]error{"Set": setErr, "Delete": delErr} {
				if got := errors.Is(err, errInjected); got != tc.wantWriteErr {
					t.Errorf("%s = %v; want injected error: %v", op, err, tc.wantWriteErr)
				}
			}
		})
	}
}

func TestDialFailureSurfacesAsError(t *testing.T) {
	newRedisClient(t) // skip or fail here when Redis is down, not on the injected fault
	faults := &faultHook{}
	faults.set(false, false, true)
	c := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	c.AddHook(faults)
	s, err := New(c, Options{Prefix: testPrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Get(context.Background(), "k"); !errors.Is(err, errInjected) || ok {
		t.Fatalf("Get with failing dial = %v, %v; want injected error", ok, err)
	}
	faults.set(false, false, false)
	if _, _, err := s.Get(context.Background(), "k"); err != nil {
		t.Fatalf("Get after dial heals: %v", err)
	}
}

// A Redis that refuses connections must not make callers wait: the cache
// turns the error into a miss and loads from the origin. With go-redis'
// default options (4 attempts of 5 dials each, with back-off) an operation
// gives up after about 1.7s by itself; the caller's ctx cuts that short.
func TestUnreachableRedisFailsPromptly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused

	for _, tc := range []struct {
		name     string
		opts     redis.Options
		deadline time.Duration // 0: no deadline on ctx
		bound    time.Duration
	}{
		{"default client options, no deadline", redis.Options{}, 0, 3 * time.Second},
		{"default client options, 100ms deadline", redis.Options{}, 100 * time.Millisecond, 1500 * time.Millisecond},
		{"no retries, no deadline", redis.Options{MaxRetries: -1, DialerRetries: 1}, 0, 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Addr = addr
			tc.opts.ContextTimeoutEnabled = true
			c := redis.NewClient(&tc.opts)
			defer c.Close()
			s, err := New(c, Options{})
			if err != nil {
				t.Fatal(err)
			}
			for name, op := range map[string]func(context.Context) error{
				"Get":    func(ctx context.Context) error { _, _, err := s.Get(ctx, "k"); return err },
				"Set":    func(ctx context.Context) error { return s.Set(ctx, "k", liveEntry("v")) },
				"Delete": func(ctx context.Context) error { return s.Delete(ctx, "k") },
			} {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if tc.deadline > 0 {
					ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				}
				start := time.Now()
				err := op(ctx)
				elapsed := time.Since(start)
				cancel()
				if err == nil || elapsed > tc.bound {
					t.Errorf("%s on unreachable Redis = %v after %v; want an error within %v", name, err, elapsed, tc.bound)
				}
			}
		})
	}
}

// A server that accepts connections but never answers must not hold a Get
// past its ctx (or past Options.Timeout when the ctx has no deadline).
func TestStuckRedisIsBoundedByContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() { // accept and read forever, never reply
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 4096)
				for {
					if _, err := conn.Read(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})

	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()

	const bound = 200 * time.Millisecond
	t.Run("ctx deadline", func(t *testing.T) {
		s, err := New(c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		start := time.Now()
		_, ok, err := s.Get(ctx, "k")
		if elapsed := time.Since(start); err == nil || ok || elapsed > bound+time.Second {
			t.Fatalf("Get = %v, %v after %v; want an error soon after %v", ok, err, elapsed, bound)
		}
	})
	t.Run("Options.Timeout", func(t *testing.T) {
		s, err := New(c, Options{Timeout: bound})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, ok, err := s.Get(context.Background(), "k")
		if elapsed := time.Since(start); err == nil || ok || elapsed > bound+time.Second {
			t.Fatalf("Get = %v, %v after %v; want an error soon after %v", ok, err, elapsed, bound)
		}
	})
}

// Concurrent readers and writers of the same keys only ever see complete
// entries that were written under that key (run with -race).
func TestConcurrentUseSeesOnlyWholeEntries(t *testing.T) {
	s, _ := newTestStore(t, Options{})
	ctx := context.Background()
	const workers, ops, keys = 8, 100, 4
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, workers*ops)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range ops {
				k := fmt.Sprintf("k%d", (i+w)%keys)
				if i%3 == 0 {
					if err := s.Set(ctx, k, liveEntry("value-of-"+k+strings.Repeat(".", w*100))); err != nil {
						errs <- err
					}
					continue
				}
				e, ok, err := s.Get(ctx, k)
				if err != nil {
					errs <- err
				} else if ok && !strings.HasPrefix(string(e.Value), "value-of-"+k) {
					errs <- fmt.Errorf("Get(%s) = %q", k, e.Value)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestHashTagPutsTheKeyInOneSlotWhateverItContains(t *testing.T) {
	// Key layout only: nothing is sent, so no server is needed.
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer client.Close()
	s, err := New(client, Options{Prefix: "p:", HashTag: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"plain", "{}", "a{b}c", "}{"} {
		rk, err := s.RedisKey(key)
		if err != nil {
			t.Fatal(err)
		}
		// The tag is the first {...} of the name: 16 hex digits, before the
		// key, so nothing in the key can change it.
		open, end := strings.IndexByte(rk, '{'), strings.IndexByte(rk, '}')
		if !strings.HasPrefix(rk, "p:{") || end-open != 17 || rk[end+1:] != key {
			t.Errorf("RedisKey(%q) = %q, want p:{<16 hex>}%s", key, rk, key)
		}
	}
	if got, want := s.MaxKeyLen(), MaxKeyLen-len("p:")-18; got != want {
		t.Errorf("MaxKeyLen = %d with HashTag, want %d", got, want)
	}
	if _, err := New(client, Options{Prefix: "x{}", HashTag: true}); !errors.Is(err, flightcache.ErrInvalidConfig) {
		t.Errorf("a prefix with braces and HashTag = %v, want a config error", err)
	}
}
