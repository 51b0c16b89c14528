package grpcflight_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/flightcache/flightcache/grpcflight"
)

// BenchmarkHerd: 1,000 identical calls at once over a loopback connection
// to a server with the interceptor, whose handler waits until all of them
// are in; each op is a new herd (a new request), and handler-calls/op is
// what the herd cost the handler.
func BenchmarkHerd(b *testing.B) {
	const n = 1000
	j := &joins{}
	var release chan struct{}
	var mu sync.Mutex
	be := &backend{}
	be.fn = func(ctx context.Context, method string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		mu.Lock()
		r := release
		mu.Unlock()
		return gated(r)(ctx, method, in)
	}
	l := newLayer(b, j, grpcflight.Options{Methods: []string{methodGet}})
	conn := serve(b, be, []grpc.ServerOption{grpc.UnaryInterceptor(l.UnaryServerInterceptor()), grpc.MaxConcurrentStreams(2 * n)})
	b.ResetTimer()
	for i := range b.N {
		mu.Lock()
		release = make(chan struct{})
		mu.Unlock()
		joined := j.n.Load()
		req := "herd-" + strconv.Itoa(i)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				if _, err := call(b.Context(), conn, methodGet, req); err != nil {
					b.Error(err)
				}
			})
		}
		for j.n.Load()-joined < n-1 {
			time.Sleep(100 * time.Microsecond) // polling the engine's count of joins
		}
		mu.Lock()
		close(release)
		mu.Unlock()
		wg.Wait()
	}
	b.ReportMetric(float64(be.calls.Load())/float64(b.N), "handler-calls/op")
}

// BenchmarkUnary: one call at a time over a loopback connection:
// impl=bare, to a server without the interceptor, and impl=grpcflight, to
// one with it, every call a hit answered from the Cache (a table of make
// perf-report).
func BenchmarkUnary(b *testing.B) {
	for _, c := range []struct {
		name  string
		sopts func(testing.TB) []grpc.ServerOption
	}{
		{"impl=bare", func(testing.TB) []grpc.ServerOption { return nil }},
		{"impl=grpcflight", func(tb testing.TB) []grpc.ServerOption {
			l := newLayer(tb, nil, grpcflight.Options{Methods: []string{methodGet}})
			return []grpc.ServerOption{grpc.UnaryInterceptor(l.UnaryServerInterceptor())}
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			be := &backend{}
			conn := serve(b, be, c.sopts(b))
			if _, err := call(b.Context(), conn, methodGet, "a"); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := call(b.Context(), conn, methodGet, "a"); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(be.calls.Load()-1)/float64(b.N), "handler-calls/op")
		})
	}
}

// BenchmarkServerInterceptor: the server interceptor's own work in process,
// without a connection: bare calls the handler, hit answers from the Cache
// (key, local hit, clone).
func BenchmarkServerInterceptor(b *testing.B) {
	info := &grpc.UnaryServerInfo{FullMethod: methodGet}
	handler := func(ctx context.Context, req any) (any, error) {
		return echo(ctx, methodGet, req.(*wrapperspb.StringValue))
	}
	req := wrapperspb.String("a")
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := handler(b.Context(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("hit", func(b *testing.B) {
		icpt := newLayer(b, nil, grpcflight.Options{Methods: []string{methodGet}}).UnaryServerInterceptor()
		if _, err := icpt(b.Context(), req, info, handler); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if _, err := icpt(b.Context(), req, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
}
