package grpcflight_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/grpcflight"
	"github.com/flightcache/flightcache/internal/leakcheck"
	"github.com/flightcache/flightcache/internal/testlocal"
	"github.com/flightcache/flightcache/singleflight"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// The test service, flighttest.Echo, has two methods on
// google.protobuf.StringValue: Get, declared idempotency_level =
// NO_SIDE_EFFECTS, and Put, declared nothing. Its descriptor is built
// here, as protoc would have written it, and registered in files, a
// registry of the tests' own.
const (
	methodGet = "/flighttest.Echo/Get"
	methodPut = "/flighttest.Echo/Put"
)

var files = func() *protoregistry.Files {
	sv := ".google.protobuf.StringValue"
	fdp := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("flighttest/echo.proto"),
		Package:    proto.String("flighttest"),
		Syntax:     proto.String("proto3"),
		Dependency: []string{"google/protobuf/wrappers.proto"},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Echo"),
			Method: []*descriptorpb.MethodDescriptorProto{
				{Name: proto.String("Get"), InputType: &sv, OutputType: &sv, Options: &descriptorpb.MethodOptions{
					IdempotencyLevel: descriptorpb.MethodOptions_NO_SIDE_EFFECTS.Enum(),
				}},
				{Name: proto.String("Put"), InputType: &sv, OutputType: &sv},
			},
		}},
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		panic(err)
	}
	f := new(protoregistry.Files)
	if err := f.RegisterFile(fd); err != nil {
		panic(err)
	}
	return f
}()

// backend is the Echo service's implementation: it counts its calls and
// answers with fn.
type backend struct {
	calls atomic.Int64
	fn    func(ctx context.Context, method string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
}

// echo answers "<method> <request>".
func echo(_ context.Context, method string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return wrapperspb.String(method + " " + in.GetValue()), nil
}

// serviceDesc is what protoc-gen-go-grpc would generate for Echo.
func serviceDesc(b *backend) *grpc.ServiceDesc {
	method := func(name string) grpc.MethodDesc {
		full := "/flighttest.Echo/" + name
		return grpc.MethodDesc{MethodName: name, Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				b.calls.Add(1)
				return b.fn(ctx, full, req.(*wrapperspb.StringValue))
			}
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, h)
		}}
	}
	return &grpc.ServiceDesc{
		ServiceName: "flighttest.Echo",
		HandlerType: (*any)(nil),
		Methods:     []grpc.MethodDesc{method("Get"), method("Put")},
		Metadata:    "flighttest/echo.proto",
	}
}

// joins counts the calls that joined a load in flight (the engine's
// EventShared), so that a test knows when its herd is waiting.
type joins struct{ n atomic.Int64 }

func (j *joins) ObserveCache(driver.Event) {}
func (j *joins) ObserveFlight(e singleflight.Event) {
	if e.Kind == singleflight.EventShared {
		j.n.Add(1)
	}
}

// newCache returns a Cache of responses on a map-backed local tier,
// observed by j (when not nil), closed at the end of the test.
func newCache(t testing.TB, j *joins, copts ...func(*flightcache.Options[proto.Message])) *flightcache.Cache[proto.Message] {
	t.Helper()
	co := flightcache.Options[proto.Message]{Local: testlocal.New[proto.Message](nil)}
	if j != nil {
		co.Observer = j
	}
	for _, f := range copts {
		f(&co)
	}
	c, err := flightcache.New(co)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newLayer returns a Layer on opts, its Cache made by newCache unless opts
// has one.
func newLayer(t testing.TB, j *joins, opts grpcflight.Options) *grpcflight.Layer {
	t.Helper()
	if opts.Cache == nil {
		opts.Cache = newCache(t, j)
	}
	l, err := grpcflight.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// serve runs b on a gRPC server on a loopback listener, with the server
// options sopts, and returns a client connection to it with the dial
// options dopts; both end with the test.
func serve(t testing.TB, b *backend, sopts []grpc.ServerOption, dopts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if b.fn == nil {
		b.fn = echo
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(sopts...)
	srv.RegisterService(serviceDesc(b), nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dopts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
		<-done
	})
	return conn
}

// call invokes method on conn with the request value v.
func call(ctx context.Context, conn *grpc.ClientConn, method, v string) (string, error) {
	out := new(wrapperspb.StringValue)
	err := conn.Invoke(ctx, method, wrapperspb.String(v), out)
	return out.GetValue(), err
}
