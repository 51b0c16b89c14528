package flightcache_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/singleflight"
)

// heldOrigin is a batch loader whose calls each wait for a release: a
// test holds a call at the origin while others queue behind it.
type heldOrigin struct {
	calls   chan heldCall // every call, as it starts
	active  atomic.Int32  // calls in progress
	maxSeen atomic.Int32  // the most calls in progress at once
}

type heldCall struct {
	ctx     context.Context
	keys    []string
	release chan heldAnswer
}

type heldAnswer struct {
	found map[string]string
	err   error
}

func newHeldOrigin() *heldOrigin { return &heldOrigin{calls: make(chan heldCall, 1024)} }

func (o *heldOrigin) load(ctx context.Context, keys []string) (map[string]string, error) {
	n := o.active.Add(1)
	defer o.active.Add(-1)
	for {
		m := o.maxSeen.Load()
		if n <= m || o.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	c := heldCall{ctx: ctx, keys: slices.Clone(keys), release: make(chan heldAnswer)}
	o.calls <- c
	a := <-c.release
	return a.found, a.err
}

// next returns the next call to reach the origin.
func (o *heldOrigin) next(t *testing.T) heldCall {
	t.Helper()
	select {
	case c := <-o.calls:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no call reached the origin")
		return heldCall{}
	}
}

// answerAll answers every key of c with "v:"+key.
func answerAll(c heldCall) {
	m := make(map[string]string, len(c.keys))
	for _, k := range c.keys {
		m[k] = "v:" + k
	}
	c.release <- heldAnswer{found: m}
}

func newBatcher(t *testing.T, load flightcache.BatchLoadFunc[string], opts flightcache.BatcherOptions) *flightcache.Batcher[string] {
	t.Helper()
	b, err := flightcache.NewBatcher(load, opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitQueued waits until n keys wait in b.
func waitQueued(t *testing.T, b *flightcache.Batcher[string], n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for b.Waiting() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d keys queued, want %d", b.Waiting(), n)
		}
		runtime.Gosched()
	}
}

type keyResult struct {
	key string
	v   string
	err error
}

// getAll starts a Get of each key on c and returns the channel of their
// results.
func getAll(c *flightcache.Cache[string], b *flightcache.Batcher[string], keys ...string) chan keyResult {
	out := make(chan keyResult, len(keys))
	for _, k := range keys {
		go func() {
			v, err := c.Get(context.Background(), k, b.Load(k))
			out <- keyResult{k, v, err}
		}()
	}
	return out
}

func TestBatcherLoneLoadGoesAtOnce(t *testing.T) {
	o := newHeldOrigin()
	// An hour of MaxDelay: a lone load that waited for a window would
	// never reach the origin within the test.
	b := newBatcher(t, o.load, flightcache.BatcherOptions{MaxDelay: time.Hour})
	c := newCache(t, flightcache.Options[string]{})
	res := getAll(c, b, "a")
	call := o.next(t)
	if !slices.Equal(call.keys, []string{"a"}) {
		t.Fatalf("call keys %v", call.keys)
	}
	answerAll(call)
	if r := <-res; r.err != nil || r.v != "v:a" {
		t.Fatalf("Get = %q, %v", r.v, r.err)
	}
}

func TestBatcherGroupsTheLoadsThatArriveDuringACall(t *testing.T) {
	o := newHeldOrigin()
	b := newBatcher(t, o.load, flightcache.BatcherOptions{})
	c := newCache(t, flightcache.Options[string]{})
	res := getAll(c, b, "first")
	first := o.next(t)
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	res2 := getAll(c, b, keys...)
	waitQueued(t, b, len(keys))
	answerAll(first)
	second := o.next(t)
	slices.Sort(second.keys)
	want := slices.Sorted(slices.Values(keys))
	if !slices.Equal(second.keys, want) {
		t.Fatalf("second call %v, want the %d keys queued during the first", second.keys, len(keys))
	}
	answerAll(second)
	if r := <-res; r.err != nil {
		t.Fatal(r.err)
	}
	for range keys {
		if r := <-res2; r.err != nil || r.v != "v:"+r.key {
			t.Fatalf("Get(%q) = %q, %v", r.key, r.v, r.err)
		}
	}
}

// returnedCall sends keys in one call and answers it: the Batcher then
// holds its next call for the callers of keys, whose next misses are
// likely on their way.
func returnedCall(t *testing.T, o *heldOrigin, c *flightcache.Cache[string], b *flightcache.Batcher[string], keys ...string) {
	t.Helper()
	res := getAll(c, b, "opener")
	opener := o.next(t)
	res2 := getAll(c, b, keys...)
	waitQueued(t, b, len(keys))
	answerAll(opener)
	call := o.next(t)
	if len(call.keys) != len(keys) {
		t.Fatalf("a call of %d keys, want the %d queued", len(call.keys), len(keys))
	}
	answerAll(call)
	<-res
	for range keys {
		if r := <-res2; r.err != nil {
			t.Fatal(r.err)
		}
	}
}

// TestBatcherHoldsAfterAReturnForItsCallers: after a call of 5 keys
// returns, the next misses wait until 5 of them are there and go in one
// call, where they went one alone and the others behind it.
func TestBatcherHoldsAfterAReturnForItsCallers(t *testing.T) {
	o := newHeldOrigin()
	b := newBatcher(t, o.load, flightcache.BatcherOptions{MaxInFlight: 1})
	b.SetHold(time.Hour) // only the expected keys can end it
	c := newCache(t, flightcache.Options[string]{})
	returnedCall(t, o, c, b, "a", "b", "c", "d", "e")
	next := []string{"a2", "b2", "c2", "d2", "e2"}
	res := getAll(c, b, next[:4]...)
	waitQueued(t, b, 4) // nothing in progress, yet they wait: the lane is held
	res = mergeResults(res, getAll(c, b, next[4]))
	call := o.next(t)
	slices.Sort(call.keys)
	if !slices.Equal(call.keys, next) {
		t.Fatalf("call %v, want the 5 keys of the returned call's callers together", call.keys)
	}
	answerAll(call)
	for range next {
		if r := <-res; r.err != nil {
			t.Fatal(r.err)
		}
	}
}

// mergeResults returns one channel of the results of a and b.
func mergeResults(a, b chan keyResult) chan keyResult {
	out := make(chan keyResult, cap(a)+cap(b))
	go func() {
		for range cap(a) {
			out <- <-a
		}
	}()
	go func() {
		for range cap(b) {
			out <- <-b
		}
	}()
	return out
}

// TestBatcherHoldEnds: when fewer callers come back than the call carried,
// the hold ends by itself (a fraction of the call's duration, at most a
// few ms), and MaxDelay bounds it too.
func TestBatcherHoldEnds(t *testing.T) {
	for _, c := range []struct {
		name string
		opts flightcache.BatcherOptions
		hold time.Duration
	}{
		// MaxInFlight 1 keeps the five keys queued behind the opener
		// whatever MaxDelay says, however slowly a loaded host starts
		// their callers: the hold after the return is what is tested.
		{"computed", flightcache.BatcherOptions{MaxInFlight: 1}, 0},
		{"MaxDelay", flightcache.BatcherOptions{MaxDelay: time.Millisecond, MaxInFlight: 1}, time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := newHeldOrigin()
			b := newBatcher(t, o.load, c.opts)
			if c.hold > 0 {
				b.SetHold(c.hold)
			}
			cache := newCache(t, flightcache.Options[string]{})
			returnedCall(t, o, cache, b, "a", "b", "c", "d", "e")
			res := getAll(cache, b, "a2", "b2")
			seen := 0
			for seen < 2 { // o.next fails the test if the keys never go
				call := o.next(t)
				seen += len(call.keys)
				answerAll(call)
			}
			for range 2 {
				if r := <-res; r.err != nil {
					t.Fatal(r.err)
				}
			}
		})
	}
}

// TestBatcherLoneCallerNeverHeld: a call of one key leaves no hold, so a
// lone caller's misses, one after another, each go at once.
func TestBatcherLoneCallerNeverHeld(t *testing.T) {
	o := newHeldOrigin()
	b := newBatcher(t, o.load, flightcache.BatcherOptions{})
	b.SetHold(time.Hour) // a hold would keep the next miss from the origin
	c := newCache(t, flightcache.Options[string]{})
	for i := range 5 {
		k := fmt.Sprint("lone", i)
		res := getAll(c, b, k)
		call := o.next(t)
		if !slices.Equal(call.keys, []string{k}) {
			t.Fatalf("call %v, want %s alone", call.keys, k)
		}
		answerAll(call)
		if r := <-res; r.err != nil || r.v != "v:"+k {
			t.Fatalf("Get(%s) = %q, %v", k, r.v, r.err)
		}
	}
}

func TestBatcherCallsHoldAtMostMaxKeys(t *testing.T) {
	o := newHeldOrigin()
	b := newBatcher(t, o.load, flightcache.BatcherOptions{MaxKeys: 3, MaxInFlight: 1})
	c := newCache(t, flightcache.Options[string]{})
	keys := make([]string, 10)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	res := getAll(c, b, keys[0])
	first := o.next(t)
	res2 := getAll(c, b, keys[1:]...)
	waitQueued(t, b, 9)
	answerAll(first)
	seen := 1
	for seen < len(keys) {
		call := o.next(t)
		if len(call.keys) > 3 {
			t.Fatalf("a call of %d keys, MaxKeys 3", len(call.keys))
		}
		seen += len(call.keys)
		answerAll(call)
	}
	<-res
	for range 9 {
		if r := <-res2; r.err != nil {
			t.Fatal(r.err)
		}
	}
}

func TestBatcherBoundsTheCallsInFlight(t *testing.T) {
	o := newHeldOrigin()
	b := newBatcher(t, o.load, flightcache.BatcherOptions{MaxKeys: 1, MaxInFlight: 2})
	c := newCache(t, flightcache.Options[string]{})
	keys := []string{"a", "b", "c", "d", "e", "f"}
	res := getAll(c, b, keys...)
	var held []heldCall
	held = append(held, o.next(t), o.next(t))
	waitQueued(t, b, len(keys)-2) // the others wait: two calls are out
	for i := range keys {
		answerAll(held[0])
		held = held[1:]
		if i+2 < len(keys) {
			held = append(held, o.next(t))
		}
	}
	for range keys {
		if r := <-res; r.err != nil {
			t.Fatal(r.err)
		}
	}
	if m := o.maxSeen.Load(); m != 2 {
		t.Fatalf("%d calls at the origin at once, MaxInFlight 2", m)
	}
}

// TestBatcherFirstCallerCancelledFailsNoOther: the member that started a
// call leaving does not end the call, nor any other member's load; the
// call's context ends only when every member's has.
func TestBatcherFirstCallerCancelledFailsNoOther(t *testing.T) {
	o := newHeldOrigin()
	b := newBatcher(t, o.load, flightcache.BatcherOptions{})
	blocker := b.Load("blocker")
	go blocker(context.Background())
	held := o.next(t)

	ctxs := make([]context.Context, 3)
	cancels := make([]context.CancelFunc, 3)
	out := make(chan keyResult, 3)
	for i := range ctxs {
		ctxs[i], cancels[i] = context.WithCancel(context.Background())
		k := fmt.Sprint("m", i)
		go func() {
			v, err := b.Load(k)(ctxs[i])
			out <- keyResult{k, v, err}
		}()
		waitQueued(t, b, i+1) // m0 is the call's first member
	}
	answerAll(held)
	call := o.next(t)
	if len(call.keys) != 3 {
		t.Fatalf("call keys %v", call.keys)
	}
	if got := len(driver.BatchMembers(call.ctx)); got != 3 {
		t.Fatalf("%d members on the call's context, want 3", got)
	}
	cancels[0]()
	if r := <-out; r.key != "m0" || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("the cancelled member got %q, %v", r.v, r.err)
	}
	if call.ctx.Err() != nil {
		t.Fatal("the call's context ended with its first member's")
	}
	answerAll(call)
	for range 2 {
		if r := <-out; r.err != nil || r.v != "v:"+r.key {
			t.Fatalf("member %s got %q, %v after the first member left", r.key, r.v, r.err)
		}
	}

	// When every member leaves, the call's context ends.
	go blocker(context.Background())
	held = o.next(t)
	for i := range ctxs {
		ctxs[i], cancels[i] = context.WithCancel(context.Background())
		go func() {
			v, err := b.Load(fmt.Sprint("n", i))(ctxs[i])
			out <- keyResult{"", v, err}
		}()
		waitQueued(t, b, i+1)
	}
	answerAll(held)
	call = o.next(t)
	for i := range cancels {
		cancels[i]()
		<-out
	}
	select {
	case <-call.ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the call's context outlived every member")
	}
	answerAll(call)
}

// TestBatcherFirstCallerCancelledThroughTheCache: on a Cache, a caller
// leaving ends its own wait and nothing else.
func TestBatcherFirstCallerCancelledThroughTheCache(t *testing.T) {
	o := newHeldOrigin()
	b := newBatcher(t, o.load, flightcache.BatcherOptions{})
	c := newCache(t, flightcache.Options[string]{})
	res := getAll(c, b, "blocker")
	held := o.next(t)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := c.Get(ctx, "first", b.Load("first"))
		first <- err
	}()
	waitQueued(t, b, 1)
	others := getAll(c, b, "x", "y", "z")
	waitQueued(t, b, 4)
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller got %v", err)
	}
	answerAll(held)
	call := o.next(t)
	if call.ctx.Err() != nil {
		t.Fatal("the call started on a cancelled context")
	}
	answerAll(call)
	<-res
	for range 3 {
		if r := <-others; r.err != nil {
			t.Fatalf("%s failed after the first caller left: %v", r.key, r.err)
		}
	}
}

func TestBatcherKeyErrorsStayWithTheirKeys(t *testing.T) {
	boom := errors.New("boom")
	load := func(ctx context.Context, keys []string) (map[string]string, error) {
		m := map[string]string{}
		for _, k := range keys {
			if k != "bad" && k != "gone" {
				m[k] = "v:" + k
			}
		}
		return m, &flightcache.BatchError{Keys: map[string]error{"bad": boom}}
	}
	o := newHeldOrigin()
	gate := func(ctx context.Context, keys []string) (map[string]string, error) {
		if slices.Contains(keys, "blocker") {
			return o.load(ctx, keys)
		}
		return load(ctx, keys)
	}
	b := newBatcher(t, gate, flightcache.BatcherOptions{})
	c := newCache(t, flightcache.Options[string]{})
	res := getAll(c, b, "blocker")
	held := o.next(t)
	others := getAll(c, b, "ok1", "bad", "gone", "ok2")
	waitQueued(t, b, 4)
	answerAll(held)
	<-res
	for range 4 {
		r := <-others
		switch r.key {
		case "bad":
			if !errors.Is(r.err, boom) {
				t.Fatalf("bad: %v, want its own error", r.err)
			}
		case "gone":
			if !errors.Is(r.err, flightcache.ErrNotFound) {
				t.Fatalf("gone: %v, want ErrNotFound", r.err)
			}
		default:
			if r.err != nil || r.v != "v:"+r.key {
				t.Fatalf("%s = %q, %v beside a failed key", r.key, r.v, r.err)
			}
		}
	}
}

func TestBatcherCallErrorFailsOnlyThatCallsKeys(t *testing.T) {
	o := newHeldOrigin()
	b := newBatcher(t, o.load, flightcache.BatcherOptions{})
	c := newCache(t, flightcache.Options[string]{})
	res := getAll(c, b, "doomed")
	held := o.next(t)
	others := getAll(c, b, "a", "b")
	waitQueued(t, b, 2)
	boom := errors.New("origin down")
	held.release <- heldAnswer{err: boom}
	if r := <-res; !errors.Is(r.err, boom) {
		t.Fatalf("doomed: %v", r.err)
	}
	answerAll(o.next(t))
	for range 2 {
		if r := <-others; r.err != nil {
			t.Fatalf("%s failed with another call's error: %v", r.key, r.err)
		}
	}
}

func TestBatcherPanicFailsItsCallOnly(t *testing.T) {
	b := newBatcher(t, func(ctx context.Context, keys []string) (map[string]string, error) {
		panic("loader bug")
	}, flightcache.BatcherOptions{})
	_, err := b.Load("k")(context.Background())
	if pe := (*singleflight.PanicError)(nil); !errors.As(err, &pe) {
		t.Fatalf("err = %v, want a *singleflight.PanicError", err)
	}
	// The Batcher goes on serving after a call panicked.
	_, err = b.Load("k2")(context.Background())
	if pe := (*singleflight.PanicError)(nil); !errors.As(err, &pe) {
		t.Fatalf("second call: err = %v", err)
	}
}

func TestBatcherPartitionsNeverShareACall(t *testing.T) {
	var mu sync.Mutex
	var calls [][]string
	b := newBatcher(t, func(ctx context.Context, keys []string) (map[string]string, error) {
		mu.Lock()
		calls = append(calls, slices.Clone(keys))
		mu.Unlock()
		return nil, nil
	}, flightcache.BatcherOptions{Partition: func(k string) string { return k[:1] }})
	c := newCache(t, flightcache.Options[string]{})
	keys := []string{"a1", "b1", "a2", "b2", "a3"}
	rs := c.FetchMany(context.Background(), keys, b.LoadMany)
	for i, r := range rs {
		if !errors.Is(r.Err, flightcache.ErrNotFound) {
			t.Fatalf("%s: %v", keys[i], r.Err)
		}
	}
	for _, call := range calls {
		for _, k := range call {
			if k[0] != call[0][0] {
				t.Fatalf("call %v mixes partitions", call)
			}
		}
	}
}

// TestBatcherJoinsFetchManyAndGets: FetchMany's loads and single Gets share
// the Batcher's calls.
func TestBatcherJoinsFetchManyAndGets(t *testing.T) {
	o := newHeldOrigin()
	b := newBatcher(t, o.load, flightcache.BatcherOptions{})
	c := newCache(t, flightcache.Options[string]{})
	res := getAll(c, b, "blocker")
	held := o.next(t)
	single := getAll(c, b, "s")
	waitQueued(t, b, 1)
	many := make(chan []flightcache.KeyResult[string], 1)
	go func() { many <- c.FetchMany(context.Background(), []string{"m1", "m2"}, b.LoadMany) }()
	waitQueued(t, b, 3)
	answerAll(held)
	call := o.next(t)
	if len(call.keys) != 3 {
		t.Fatalf("call %v, want s, m1 and m2 together", call.keys)
	}
	answerAll(call)
	<-res
	if r := <-single; r.err != nil {
		t.Fatal(r.err)
	}
	for _, r := range <-many {
		if r.Err != nil || r.Value[:2] != "v:" {
			t.Fatalf("FetchMany: %q, %v", r.Value, r.Err)
		}
	}
}

func TestBatcherMaxDelaySendsWaitingKeys(t *testing.T) {
	o := newHeldOrigin()
	b := newBatcher(t, o.load, flightcache.BatcherOptions{MaxDelay: time.Millisecond})
	c := newCache(t, flightcache.Options[string]{})
	res := getAll(c, b, "slow")
	held := o.next(t)
	quick := getAll(c, b, "quick")
	call := o.next(t) // while the first call is still held
	answerAll(call)
	if r := <-quick; r.err != nil {
		t.Fatal(r.err)
	}
	answerAll(held)
	<-res
}

// TestBatcherFailedRefreshKeepsTheOldValue: an early refresh of a Batcher
// key is a call of the Batcher; when it fails, the old value stays.
func TestBatcherFailedRefreshKeepsTheOldValue(t *testing.T) {
	clock := newFakeClock()
	local := &notifyLocal[string]{LocalStore: newLocal[string](t, clock), sets: make(chan driver.Item[string], 1)}
	c := clocked(t, clock, flightcache.Options[string]{Local: local, TTL: time.Minute, Jitter: flightcache.DisableJitter, EarlyRefresh: true})
	var calls atomic.Int64
	refreshed := make(chan []string, 1)
	b := newBatcher(t, func(ctx context.Context, keys []string) (map[string]string, error) {
		if calls.Add(1) == 1 {
			clock.Advance(30 * time.Second) // Δ = 30s
			return map[string]string{"k": "old"}, nil
		}
		refreshed <- slices.Clone(keys)
		return nil, errors.New("origin down")
	}, flightcache.BatcherOptions{})
	if v, err := c.Get(context.Background(), "k", b.Load("k")); err != nil || v != "old" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	<-local.sets
	clock.Advance(time.Minute - time.Nanosecond) // a refresh is all but certain
	r := mustFetch(t, c, "k", b.Load("k"))
	if r.Outcome != flightcache.OutcomeRefreshed || r.Value != "old" {
		t.Fatalf("Fetch = %q, %v; want the old value and a refresh started", r.Value, r.Outcome)
	}
	if keys := <-refreshed; !slices.Equal(keys, []string{"k"}) {
		t.Fatalf("refresh call %v", keys)
	}
	// The refresh failed: the old value stays, until it expires.
	for {
		r = mustFetch(t, c, "k", b.Load("k"))
		if r.Value != "old" || !r.Outcome.Hit() {
			t.Fatalf("after a failed refresh: %q, %v", r.Value, r.Outcome)
		}
		if r.Outcome != flightcache.OutcomeRefreshed {
			break
		}
		<-refreshed
	}
}

func TestNewBatcherRejectsBadOptions(t *testing.T) {
	ok := func(context.Context, []string) (map[string]string, error) { return nil, nil }
	for _, tc := range []struct {
		field string
		load  flightcache.BatchLoadFunc[string]
		opts  flightcache.BatcherOptions
	}{
		{"load", nil, flightcache.BatcherOptions{}},
		{"MaxKeys", ok, flightcache.BatcherOptions{MaxKeys: -1}},
		{"MaxDelay", ok, flightcache.BatcherOptions{MaxDelay: -1}},
		{"MaxInFlight", ok, flightcache.BatcherOptions{MaxInFlight: -1}},
	} {
		_, err := flightcache.NewBatcher(tc.load, tc.opts)
		var ce *flightcache.ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%s: err = %v", tc.field, err)
		}
	}
}

// TestBatchLoaderKeyErrorsStayWithTheirKeys: a BatchLoadFunc of FetchMany
// fails single keys with a *BatchError's Keys; the others are served and
// cached.
func TestBatchLoaderKeyErrorsStayWithTheirKeys(t *testing.T) {
	boom := errors.New("boom")
	var calls atomic.Int64
	load := func(ctx context.Context, keys []string) (map[string]string, error) {
		calls.Add(1)
		m := map[string]string{}
		for _, k := range keys {
			m[k] = "v:" + k
		}
		return m, &flightcache.BatchError{Keys: map[string]error{"bad": boom, "gone": flightcache.ErrNotFound}}
	}
	c := newCache(t, flightcache.Options[string]{})
	keys := []string{"a", "bad", "gone", "b"}
	got, err := c.GetMany(context.Background(), keys, load)
	var be *flightcache.BatchError
	if !errors.As(err, &be) || be.Failed != 1 || !errors.Is(be.Keys["bad"], boom) || len(be.Keys) != 1 {
		t.Fatalf("err = %#v", err)
	}
	if len(got) != 2 || got["a"] != "v:a" || got["b"] != "v:b" {
		t.Fatalf("values %v", got)
	}
	// a, b and gone's tombstone are cached; bad is not.
	rs := c.FetchMany(context.Background(), keys, load)
	if calls.Load() != 2 || !rs[0].Outcome.Hit() || rs[2].Outcome != flightcache.OutcomeNegativeHit || rs[1].Outcome != flightcache.OutcomeLoadFailed {
		t.Fatalf("%d calls; outcomes %v %v %v %v", calls.Load(), rs[0].Outcome, rs[1].Outcome, rs[2].Outcome, rs[3].Outcome)
	}
}

// SetTags on a Batcher's call tags the value of every member, as SetTTL
// does; a member's own LoadFunc adds the tags of its key alone. An
// InvalidateTag of the call's tag then reloads every member's key, and one
// of a member's own tag that member's key only.
func TestBatcherCallTagsEveryMemberAndMembersAddTheirOwn(t *testing.T) {
	var calls atomic.Int64
	load := func(ctx context.Context, keys []string) (map[string]string, error) {
		n := calls.Add(1)
		flightcache.SetTags(ctx, "call")
		out := make(map[string]string, len(keys))
		for _, k := range keys {
			out[k] = fmt.Sprintf("v%d:%s", n, k)
		}
		return out, nil
	}
	b := newBatcher(t, load, flightcache.BatcherOptions{})
	c := newCache(t, flightcache.Options[string]{})
	ctx := context.Background()
	own := func(k string) flightcache.LoadFunc[string] {
		inner := b.Load(k)
		return func(ctx context.Context) (string, error) {
			v, err := inner(ctx)
			flightcache.SetTags(ctx, "own:"+k)
			return v, err
		}
	}
	get := func(k string) string {
		t.Helper()
		v, err := c.Get(ctx, k, own(k))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	a1, b1 := get("a"), get("b")
	if err := c.InvalidateTag(ctx, "own:a"); err != nil {
		t.Fatal(err)
	}
	if a2, b2 := get("a"), get("b"); a2 == a1 || b2 != b1 {
		t.Fatalf("after InvalidateTag(own:a): a %q→%q (want reloaded), b %q→%q (want kept)", a1, a2, b1, b2)
	}
	before := calls.Load()
	if err := c.InvalidateTag(ctx, "call"); err != nil {
		t.Fatal(err)
	}
	get("a")
	get("b")
	if n := calls.Load() - before; n != 2 {
		t.Fatalf("after InvalidateTag(call): %d origin calls, want 2 (each key reloaded)", n)
	}
}
