package grpcflight_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/grpcflight"
	"github.com/flightcache/flightcache/internal/testlocal"
)

// countingHealth is grpc's health service, counting the calls that reach
// it.
type countingHealth struct {
	*health.Server
	calls atomic.Int64
}

func (h *countingHealth) Check(ctx context.Context, req *grpc_health_v1.HealthCheckRequest) (*grpc_health_v1.HealthCheckResponse, error) {
	h.calls.Add(1)
	return h.Server.Check(ctx, req)
}

func Example() {
	// A service's local tier is memstore (memstore.New[proto.Message]);
	// add redisstore (with grpcflight.Codec) and redislease's Coordinator
	// to share answers and collapse calls across instances.
	responses, err := flightcache.New(flightcache.Options[proto.Message]{
		Local: testlocal.New[proto.Message](nil),
	})
	if err != nil {
		panic(err)
	}
	defer responses.Close()

	layer, err := grpcflight.New(grpcflight.Options{
		Cache:       responses,
		Methods:     []string{grpc_health_v1.Health_Check_FullMethodName},
		KeyMetadata: []string{"tenant"}, // the handler's answer depends on it
	})
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(layer.UnaryServerInterceptor()))
	svc := &countingHealth{Server: health.NewServer()}
	grpc_health_v1.RegisterHealthServer(srv, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := grpc_health_v1.NewHealthClient(conn)
	for range 3 {
		resp, err := client.Check(context.Background(), &grpc_health_v1.HealthCheckRequest{})
		if err != nil {
			panic(err)
		}
		fmt.Println(resp.GetStatus())
	}
	fmt.Println("handler calls:", svc.calls.Load())
	// Output:
	// SERVING
	// SERVING
	// SERVING
	// handler calls: 1
}

// The client side: the calls a client makes together share one call on the
// connection, and each caller's reply gets its own copy of the answer.
func ExampleLayer_UnaryClientInterceptor() {
	answers, err := flightcache.New(flightcache.Options[proto.Message]{
		Local: testlocal.New[proto.Message](nil),
	})
	if err != nil {
		panic(err)
	}
	defer answers.Close()
	layer, err := grpcflight.New(grpcflight.Options{
		Cache:   answers,
		Methods: []string{grpc_health_v1.Health_Check_FullMethodName},
		TTL:     time.Minute,
	})
	if err != nil {
		panic(err)
	}

	srv := grpc.NewServer()
	svc := &countingHealth{Server: health.NewServer()}
	grpc_health_v1.RegisterHealthServer(srv, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(layer.UnaryClientInterceptor()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := grpc_health_v1.NewHealthClient(conn)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if _, err := client.Check(context.Background(), &grpc_health_v1.HealthCheckRequest{}); err != nil {
				panic(err)
			}
		})
	}
	wg.Wait()
	// The herd and anything after it within the TTL: one call reached the server.
	fmt.Println("server calls:", svc.calls.Load())
	// Output:
	// server calls: 1
}
