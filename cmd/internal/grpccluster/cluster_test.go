package grpccluster

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/cmd/internal/testleak"
	"github.com/flightcache/flightcache/grpcflight"
	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/flightcache/flightcache/internal/testlocal"
	"github.com/flightcache/flightcache/redislease"
	"github.com/flightcache/flightcache/redisstore"
)

func TestMain(m *testing.M) { testleak.Main(m, nil) }

// gatedHealth is grpc's health service whose first Check waits for gate;
// it counts the Checks that reach it.
type gatedHealth struct {
	*health.Server
	calls atomic.Int64
	gate  chan struct{}
}

func (h *gatedHealth) Check(ctx context.Context, req *grpc_health_v1.HealthCheckRequest) (*grpc_health_v1.HealthCheckResponse, error) {
	if h.calls.Add(1) == 1 {
		<-h.gate
	}
	return h.Server.Check(ctx, req)
}

// Three servers sharing the real Redis (a prefix of their own) run a herd
// spread over all three once: the key (method, deterministic request) is
// the same on every instance, and the answer travels through Redis in
// grpcflight.Codec.
func TestThreeServersOnRedisRunAHerdOnce(t *testing.T) {
	addr := testenv.RequireRedis(t)
	const perServer = 20
	svc := &gatedHealth{Server: health.NewServer(), gate: make(chan struct{})}
	var arrived atomic.Int64
	count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		arrived.Add(1)
		return next(ctx, req)
	}
	prefix := testenv.UniqueName("grpcflight-test:")
	var conns []*grpc.ClientConn
	for range 3 {
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 32})
		t.Cleanup(func() { _ = rdb.Close() })
		store, err := redisstore.New(rdb, redisstore.Options{Prefix: prefix, HashTag: true})
		if err != nil {
			t.Fatal(err)
		}
		// A Claim past the Coordinator's Timeout sends its server to the
		// handler on its own, as it should; 5s leaves a loaded host room
		// (the 250ms default made a herd run 2 and 3 times under two
		// test suites side by side).
		coord, err := redislease.New(t.Context(), rdb, store, redislease.Options{Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		cache, err := flightcache.New(flightcache.Options[proto.Message]{
			Local:         testlocal.New[proto.Message](nil),
			Shared:        store,
			Codec:         grpcflight.Codec{},
			Coordinator:   coord,
			SharedTimeout: 10 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		layer, err := grpcflight.New(grpcflight.Options{Cache: cache, Methods: []string{grpc_health_v1.Health_Check_FullMethodName}})
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer(grpc.ChainUnaryInterceptor(count, layer.UnaryServerInterceptor()))
		grpc_health_v1.RegisterHealthServer(srv, svc)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = srv.Serve(lis)
		}()
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { // in reverse: the connection, the server, the Cache, the Coordinator
			_ = conn.Close()
			srv.Stop()
			<-done
			_ = cache.Close()
			_ = coord.Close()
		})
		conns = append(conns, conn)
	}

	errs := make(chan error, 3*perServer)
	var wg sync.WaitGroup
	for _, conn := range conns {
		client := grpc_health_v1.NewHealthClient(conn)
		for range perServer {
			wg.Go(func() {
				resp, err := client.Check(t.Context(), &grpc_health_v1.HealthCheckRequest{Service: ""})
				if err == nil && resp.GetStatus() != grpc_health_v1.HealthCheckResponse_SERVING {
					t.Errorf("answer %v", resp.GetStatus())
				}
				errs <- err
			})
		}
	}
	// Every call has reached a server while the handler holds the first:
	// each of the others waits for it, on its server or through Redis.
	deadline := time.Now().Add(20 * time.Second)
	for arrived.Load() < 3*perServer || svc.calls.Load() < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls arrived, %d handler calls", arrived.Load(), svc.calls.Load())
		}
		time.Sleep(time.Millisecond) // polling observable state
	}
	close(svc.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := svc.calls.Load(); got != 1 {
		t.Fatalf("%d handler calls for a herd of %d over 3 servers, want 1", got, 3*perServer)
	}
}
