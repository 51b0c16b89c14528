package grpcflight_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/grpcflight"
	"github.com/flightcache/flightcache/internal/testlocal"
)

// herd makes n concurrent calls of method with the request v on conn, and
// releases the handler (which waits on release) once n-1 of them joined
// the first one's load. It returns the answers.
func herd(t *testing.T, n int, j *joins, release chan struct{}, do func() (string, error)) []string {
	t.Helper()
	answers := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i], errs[i] = do() })
	}
	for j.n.Load() < int64(n-1) {
		time.Sleep(time.Millisecond) // polling observable state: the engine's count of joins
	}
	close(release)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	return answers
}

// gated returns a backend function that waits for release before echoing.
func gated(release chan struct{}) func(ctx context.Context, method string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return func(ctx context.Context, method string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return echo(ctx, method, in)
	}
}

func TestServerHerdRunsTheHandlerOnce(t *testing.T) {
	const n = 64
	j := &joins{}
	release := make(chan struct{})
	b := &backend{fn: gated(release)}
	l := newLayer(t, j, grpcflight.Options{Methods: []string{methodGet}})
	conn := serve(t, b, []grpc.ServerOption{grpc.UnaryInterceptor(l.UnaryServerInterceptor())})

	answers := herd(t, n, j, release, func() (string, error) { return call(t.Context(), conn, methodGet, "a") })
	for i, a := range answers {
		if a != methodGet+" a" {
			t.Fatalf("answer %d = %q", i, a)
		}
	}
	if got := b.calls.Load(); got != 1 {
		t.Fatalf("the handler ran %d times for a herd of %d, want 1", got, n)
	}
	// The answer is cached: one more call is a hit.
	if a, err := call(t.Context(), conn, methodGet, "a"); err != nil || a != methodGet+" a" || b.calls.Load() != 1 {
		t.Fatalf("after the herd: %q, %v, %d handler calls", a, err, b.calls.Load())
	}
}

func TestClientHerdMakesOneCall(t *testing.T) {
	const n = 64
	j := &joins{}
	release := make(chan struct{})
	b := &backend{fn: gated(release)}
	l := newLayer(t, j, grpcflight.Options{Methods: []string{methodGet}})
	conn := serve(t, b, nil, grpc.WithUnaryInterceptor(l.UnaryClientInterceptor()))

	answers := herd(t, n, j, release, func() (string, error) { return call(t.Context(), conn, methodGet, "a") })
	for i, a := range answers {
		if a != methodGet+" a" {
			t.Fatalf("answer %d = %q", i, a)
		}
	}
	if got := b.calls.Load(); got != 1 {
		t.Fatalf("the server got %d calls for a herd of %d, want 1", got, n)
	}
}

func TestDistinctRequestsAreNotMerged(t *testing.T) {
	b := &backend{}
	l := newLayer(t, nil, grpcflight.Options{Methods: []string{methodGet, methodPut}})
	conn := serve(t, b, []grpc.ServerOption{grpc.UnaryInterceptor(l.UnaryServerInterceptor())})
	for _, c := range []struct{ method, req string }{{methodGet, "a"}, {methodGet, "b"}, {methodPut, "a"}, {methodGet, "a"}, {methodGet, "b"}, {methodPut, "a"}} {
		got, err := call(t.Context(), conn, c.method, c.req)
		if want := c.method + " " + c.req; err != nil || got != want {
			t.Fatalf("%s(%q) = %q, %v; want %q", c.method, c.req, got, err, want)
		}
	}
	if got := b.calls.Load(); got != 3 {
		t.Fatalf("handler calls = %d, want 3 (one per method and request)", got)
	}
}

// whoami answers with the request and the caller's authorization and
// tenant metadata.
func whoami(ctx context.Context, method string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	return wrapperspb.String(fmt.Sprintf("%s auth=%v tenant=%v", in.GetValue(), md.Get("authorization"), md.Get("tenant"))), nil
}

func TestUndeclaredAuthorizationIsNotShared(t *testing.T) {
	b := &backend{fn: whoami}
	l := newLayer(t, nil, grpcflight.Options{Methods: []string{methodGet}})
	conn := serve(t, b, []grpc.ServerOption{grpc.UnaryInterceptor(l.UnaryServerInterceptor())})
	for _, user := range []string{"alice", "bob", "alice"} {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+user)
		got, err := call(ctx, conn, methodGet, "a")
		if want := "a auth=[Bearer " + user + "] tenant=[]"; err != nil || got != want {
			t.Fatalf("%s got %q, %v; want %q", user, got, err, want)
		}
	}
	if got := b.calls.Load(); got != 3 {
		t.Fatalf("handler calls = %d, want 3: a call with an undeclared authorization passes through", got)
	}
}

func TestClientUndeclaredCredentialsAreNotShared(t *testing.T) {
	b := &backend{fn: whoami}
	l := newLayer(t, nil, grpcflight.Options{Methods: []string{methodGet}})
	conn := serve(t, b, nil, grpc.WithUnaryInterceptor(l.UnaryClientInterceptor()))
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer alice")
	for range 2 {
		if _, err := call(ctx, conn, methodGet, "a"); err != nil {
			t.Fatal(err)
		}
	}
	// A per-RPC credential is invisible in the metadata: its call option
	// makes the call pass through too.
	creds := grpc.PerRPCCredentials(staticCreds{"authorization": "Bearer bob"})
	for range 2 {
		out := new(wrapperspb.StringValue)
		if err := conn.Invoke(t.Context(), methodGet, wrapperspb.String("a"), out, creds); err != nil {
			t.Fatal(err)
		}
		if want := "a auth=[Bearer bob] tenant=[]"; out.GetValue() != want {
			t.Fatalf("with per-RPC credentials: %q, want %q", out.GetValue(), want)
		}
	}
	if got := b.calls.Load(); got != 4 {
		t.Fatalf("server calls = %d, want 4: calls with credentials pass through", got)
	}
}

// staticCreds is a per-RPC credential sent without transport security.
type staticCreds map[string]string

func (c staticCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return c, nil
}
func (staticCreds) RequireTransportSecurity() bool { return false }

var _ credentials.PerRPCCredentials = staticCreds(nil)

func TestDeclaredMetadataSplitsKeys(t *testing.T) {
	b := &backend{fn: whoami}
	l := newLayer(t, nil, grpcflight.Options{Methods: []string{methodGet}, KeyMetadata: []string{"Authorization", "tenant"}})
	conn := serve(t, b, []grpc.ServerOption{grpc.UnaryInterceptor(l.UnaryServerInterceptor())})
	for _, c := range []struct{ auth, tenant string }{{"alice", "t1"}, {"alice", "t2"}, {"bob", "t1"}, {"alice", "t1"}, {"bob", "t1"}, {"", "t1"}, {"", "t1"}} {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "tenant", c.tenant)
		auth := "[]"
		if c.auth != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", c.auth)
			auth = "[" + c.auth + "]"
		}
		got, err := call(ctx, conn, methodGet, "a")
		if want := "a auth=" + auth + " tenant=[" + c.tenant + "]"; err != nil || got != want {
			t.Fatalf("%+v got %q, %v; want %q", c, got, err, want)
		}
	}
	if got := b.calls.Load(); got != 4 {
		t.Fatalf("handler calls = %d, want 4 (alice/t1, alice/t2, bob/t1, none/t1)", got)
	}
}

func TestServerClonesOnRead(t *testing.T) {
	l := newLayer(t, nil, grpcflight.Options{Methods: []string{methodGet}})
	icpt := l.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: methodGet}
	handler := func(ctx context.Context, req any) (any, error) {
		return echo(ctx, methodGet, req.(*wrapperspb.StringValue))
	}
	first, err := icpt(t.Context(), wrapperspb.String("a"), info, handler)
	if err != nil {
		t.Fatal(err)
	}
	first.(*wrapperspb.StringValue).Value = "mutated by the first caller"
	second, err := icpt(t.Context(), wrapperspb.String("a"), info, func(context.Context, any) (any, error) {
		t.Fatal("the handler ran again: the answer was not cached")
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := second.(*wrapperspb.StringValue).GetValue(); got != methodGet+" a" {
		t.Fatalf("second caller got %q: the first caller's mutation reached it", got)
	}
}

func TestClientClonesOnRead(t *testing.T) {
	b := &backend{}
	l := newLayer(t, nil, grpcflight.Options{Methods: []string{methodGet}})
	conn := serve(t, b, nil, grpc.WithUnaryInterceptor(l.UnaryClientInterceptor()))
	first := new(wrapperspb.StringValue)
	if err := conn.Invoke(t.Context(), methodGet, wrapperspb.String("a"), first); err != nil {
		t.Fatal(err)
	}
	first.Value = "mutated by the first caller"
	second := &wrapperspb.StringValue{Value: "left over in the reply"}
	if err := conn.Invoke(t.Context(), methodGet, wrapperspb.String("a"), second); err != nil {
		t.Fatal(err)
	}
	if second.GetValue() != methodGet+" a" || b.calls.Load() != 1 {
		t.Fatalf("second caller got %q after %d server calls, want %q after 1", second.GetValue(), b.calls.Load(), methodGet+" a")
	}
}

func TestHandlerStatusPassesThroughUncached(t *testing.T) {
	b := &backend{fn: func(context.Context, string, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return nil, status.Error(codes.NotFound, "no such thing")
	}}
	l := newLayer(t, nil, grpcflight.Options{Methods: []string{methodGet}})
	conn := serve(t, b, []grpc.ServerOption{grpc.UnaryInterceptor(l.UnaryServerInterceptor())})
	for range 2 {
		_, err := call(t.Context(), conn, methodGet, "a")
		if s := status.Convert(err); s.Code() != codes.NotFound || s.Message() != "no such thing" {
			t.Fatalf("got %v, want the handler's NotFound unchanged", err)
		}
	}
	if got := b.calls.Load(); got != 2 {
		t.Fatalf("handler calls = %d, want 2: an error is not cached", got)
	}
}

func TestCacheNotFoundKeepsANegativeAnswer(t *testing.T) {
	b := &backend{fn: func(context.Context, string, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return nil, status.Error(codes.NotFound, "no such thing")
	}}
	l := newLayer(t, nil, grpcflight.Options{Methods: []string{methodGet}, CacheNotFound: true})
	conn := serve(t, b, []grpc.ServerOption{grpc.UnaryInterceptor(l.UnaryServerInterceptor())})
	_, err := call(t.Context(), conn, methodGet, "a")
	if s := status.Convert(err); s.Code() != codes.NotFound || s.Message() != "no such thing" {
		t.Fatalf("first call: %v, want the handler's NotFound unchanged", err)
	}
	for range 2 {
		if _, err := call(t.Context(), conn, methodGet, "a"); status.Code(err) != codes.NotFound {
			t.Fatalf("later call: %v, want NotFound", err)
		}
	}
	if got := b.calls.Load(); got != 1 {
		t.Fatalf("handler calls = %d, want 1: the NotFound is cached", got)
	}
	// Another request is another key.
	if _, err := call(t.Context(), conn, methodGet, "b"); status.Code(err) != codes.NotFound || b.calls.Load() != 2 {
		t.Fatalf("another request: %v after %d handler calls, want NotFound after 2", err, b.calls.Load())
	}
}

func TestHandlerPanicIsInternal(t *testing.T) {
	b := &backend{fn: func(context.Context, string, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		panic("boom")
	}}
	l := newLayer(t, nil, grpcflight.Options{Methods: []string{methodGet}})
	conn := serve(t, b, []grpc.ServerOption{grpc.UnaryInterceptor(l.UnaryServerInterceptor())})
	_, err := call(t.Context(), conn, methodGet, "a")
	if s := status.Convert(err); s.Code() != codes.Internal || !strings.Contains(s.Message(), "boom") {
		t.Fatalf("got %v, want Internal naming the panic", err)
	}
}

func TestLoaderTimeoutIsUnavailable(t *testing.T) {
	b := &backend{fn: func(ctx context.Context, method string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		<-ctx.Done() // the Cache's LoaderTimeout
		return nil, status.FromContextError(ctx.Err()).Err()
	}}
	cache := newCache(t, nil, func(o *flightcache.Options[proto.Message]) { o.LoaderTimeout = 50 * time.Millisecond })
	l := newLayer(t, nil, grpcflight.Options{Cache: cache, Methods: []string{methodGet}})
	conn := serve(t, b, []grpc.ServerOption{grpc.UnaryInterceptor(l.UnaryServerInterceptor())})
	_, err := call(t.Context(), conn, methodGet, "a")
	if code := status.Code(err); code != codes.Unavailable {
		t.Fatalf("got %v, want Unavailable: the shared call timed out, not the caller", err)
	}
}

// The caller's own deadline or cancellation, while the load it waits for
// goes on, is DeadlineExceeded or Canceled.
func TestCallerDeadlineAndCancel(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	l := newLayer(t, nil, grpcflight.Options{Methods: []string{methodGet}})
	icpt := l.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: methodGet}
	handler := func(ctx context.Context, req any) (any, error) {
		<-release
		return req, nil
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := icpt(ctx, wrapperspb.String("a"), info, handler); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("past the deadline: %v, want DeadlineExceeded", err)
	}
	ctx, cancel = context.WithCancel(t.Context())
	time.AfterFunc(20*time.Millisecond, cancel)
	if _, err := icpt(ctx, wrapperspb.String("a"), info, handler); status.Code(err) != codes.Canceled {
		t.Fatalf("canceled: %v, want Canceled", err)
	}
}

func TestMethodsNotOptedInPassThrough(t *testing.T) {
	b := &backend{}
	l := newLayer(t, nil, grpcflight.Options{Methods: []string{methodGet}})
	conn := serve(t, b, []grpc.ServerOption{grpc.UnaryInterceptor(l.UnaryServerInterceptor())})
	for range 3 {
		if got, err := call(t.Context(), conn, methodPut, "a"); err != nil || got != methodPut+" a" {
			t.Fatalf("Put = %q, %v", got, err)
		}
	}
	if got := b.calls.Load(); got != 3 {
		t.Fatalf("handler calls = %d, want 3: Put is not opted in", got)
	}
}

func TestNoSideEffectsOptsIn(t *testing.T) {
	b := &backend{}
	l := newLayer(t, nil, grpcflight.Options{NoSideEffects: true, Files: files})
	conn := serve(t, b, []grpc.ServerOption{grpc.UnaryInterceptor(l.UnaryServerInterceptor())})
	for range 3 {
		for _, m := range []string{methodGet, methodPut} {
			if got, err := call(t.Context(), conn, m, "a"); err != nil || got != m+" a" {
				t.Fatalf("%s = %q, %v", m, got, err)
			}
		}
	}
	if got := b.calls.Load(); got != 4 {
		t.Fatalf("handler calls = %d, want 4: Get (NO_SIDE_EFFECTS) once, Put (no option) three times", got)
	}
}

func TestMethodTTLOverridesTTL(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var mu sync.Mutex
	clk := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	cache := newCache(t, nil, func(o *flightcache.Options[proto.Message]) {
		o.Now, o.Jitter, o.StaleFor = clk, flightcache.DisableJitter, 0
		o.Local = testlocal.New[proto.Message](clk)
	})
	b := &backend{}
	l := newLayer(t, nil, grpcflight.Options{
		Cache:     cache,
		Methods:   []string{methodGet, methodPut},
		TTL:       time.Minute,
		MethodTTL: map[string]time.Duration{methodPut: 10 * time.Minute},
	})
	conn := serve(t, b, []grpc.ServerOption{grpc.UnaryInterceptor(l.UnaryServerInterceptor())})
	round := func() {
		for _, m := range []string{methodGet, methodPut} {
			if _, err := call(t.Context(), conn, m, "a"); err != nil {
				t.Fatal(err)
			}
		}
	}
	round()
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	round()
	if got := b.calls.Load(); got != 3 {
		t.Fatalf("handler calls = %d, want 3: Get (TTL 1m) twice, Put (10m) once", got)
	}
}

// The Cache's StaleFor serves an answer past its TTL when the handler
// fails.
func TestStaleForServesTheLastAnswerWhenTheHandlerFails(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var mu sync.Mutex
	clk := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	cache := newCache(t, nil, func(o *flightcache.Options[proto.Message]) {
		o.Now, o.Jitter, o.StaleFor = clk, flightcache.DisableJitter, time.Hour
		o.Local = testlocal.New[proto.Message](clk)
	})
	var failing atomic.Bool
	b := &backend{fn: func(ctx context.Context, method string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if failing.Load() {
			return nil, status.Error(codes.Unavailable, "database down")
		}
		return echo(ctx, method, in)
	}}
	l := newLayer(t, nil, grpcflight.Options{Cache: cache, Methods: []string{methodGet}, TTL: time.Minute})
	conn := serve(t, b, []grpc.ServerOption{grpc.UnaryInterceptor(l.UnaryServerInterceptor())})
	if _, err := call(t.Context(), conn, methodGet, "a"); err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	got, err := call(t.Context(), conn, methodGet, "a")
	if err != nil || got != methodGet+" a" {
		t.Fatalf("past the TTL with the handler failing: %q, %v; want the stale answer", got, err)
	}
	if n := b.calls.Load(); n != 2 {
		t.Fatalf("handler calls = %d, want 2 (the load, then the failed refresh)", n)
	}
	// Without a stale answer (another request), the handler's error.
	if _, err := call(t.Context(), conn, methodGet, "b"); status.Code(err) != codes.Unavailable {
		t.Fatalf("a cold key with the handler failing: %v, want its Unavailable", err)
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	cache := newCache(t, nil)
	for _, c := range []struct {
		field string
		opts  grpcflight.Options
	}{
		{"Cache", grpcflight.Options{}},
		{"Methods", grpcflight.Options{Cache: cache, Methods: []string{"flighttest.Echo/Get"}}},
		{"Methods", grpcflight.Options{Cache: cache, Methods: []string{"/flighttest.Echo"}}},
		{"MethodTTL", grpcflight.Options{Cache: cache, MethodTTL: map[string]time.Duration{methodGet: -time.Second}}},
		{"TTL", grpcflight.Options{Cache: cache, TTL: -time.Second}},
		{"KeyMetadata", grpcflight.Options{Cache: cache, KeyMetadata: []string{":authority"}}},
		{"Namespace", grpcflight.Options{Cache: cache, Namespace: strings.Repeat("n", 2000)}},
	} {
		_, err := grpcflight.New(c.opts)
		var ce *grpcflight.ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("New(%+v) = %v, want a *ConfigError on %s", c.opts, err, c.field)
		}
	}
}

func TestCodecRoundTripsAndRefusesGarbage(t *testing.T) {
	var c grpcflight.Codec
	b, err := c.Marshal(wrapperspb.String("x"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Unmarshal(b)
	if err != nil || !proto.Equal(m, wrapperspb.String("x")) {
		t.Fatalf("round trip: %v, %v", m, err)
	}
	if _, err := c.Unmarshal([]byte("\xff\xff garbage")); !errors.Is(err, grpcflight.ErrCorrupt) {
		t.Fatalf("garbage: %v, want ErrCorrupt", err)
	}
}
