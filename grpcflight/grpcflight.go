package grpcflight

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/key"
	"github.com/flightcache/flightcache/singleflight"
)

// DefaultNamespace is the key namespace of stored responses.
const DefaultNamespace = "grpc"

// DefaultCredentials are the metadata keys that carry a caller's identity.
// A call that carries one of them is collapsed only when Options.KeyMetadata
// declares it, so that one caller's answer never reaches another identity.
var DefaultCredentials = []string{"authorization", "cookie", "proxy-authorization", "x-api-key"}

// Options configures a Layer.
type Options struct {
	// Cache holds the responses: its tiers (give it Codec for a shared
	// tier), its Coordinator for collapsing across instances, StaleFor and
	// SoftTimeout (a response kept past its TTL and served when the
	// handler fails or is slow), LoaderTimeout (the bound of one handler
	// call) and MaxWaiters (the cap on calls waiting for one response).
	// Required.
	Cache *flightcache.Cache[proto.Message]
	// Namespace is the namespace of the keys (package key). Default
	// DefaultNamespace. Two Layers sharing a Cache's tiers need two
	// namespaces.
	Namespace string
	// Methods opts methods in by full name ("/package.Service/Method").
	Methods []string
	// NoSideEffects also opts in every method whose descriptor, found in
	// Files, has the option idempotency_level = NO_SIDE_EFFECTS.
	NoSideEffects bool
	// Files resolves service descriptors for NoSideEffects. Default
	// protoregistry.GlobalFiles, where generated code registers its files.
	Files Resolver
	// KeyMetadata names the metadata keys that select the answer besides
	// the method and the request (a tenant, a locale, the authorization of
	// a per-user answer): each one's values are part of the key. Every key
	// the handler reads that changes its answer must be named here, or one
	// caller's answer is served to another (see the package documentation,
	// "Cache poisoning"). Matched case-insensitively.
	KeyMetadata []string
	// Credentials names the metadata keys that identify a caller. A call
	// carrying one that KeyMetadata does not declare passes straight
	// through: it is neither collapsed nor cached. Default
	// DefaultCredentials; an empty non-nil slice turns the check off.
	Credentials []string
	// TTL is how long a response stays fresh. Default (0) the Cache's TTL.
	TTL time.Duration
	// MethodTTL overrides TTL for the methods it names (full names).
	MethodTTL map[string]time.Duration
	// CacheNotFound caches a handler's NotFound status as a negative
	// answer for the Cache's NegativeTTL: the calls in that time are
	// answered NotFound without running the handler. Off by default: every
	// error of the handler passes through uncached. Turn it on only for
	// methods whose NotFound does not depend on anything outside the key.
	CacheNotFound bool
}

// Resolver finds descriptors by full name; *protoregistry.Files is one.
type Resolver interface {
	FindDescriptorByName(protoreflect.FullName) (protoreflect.Descriptor, error)
}

// ConfigError reports invalid Options.
type ConfigError struct {
	// Field is the Options field at fault.
	Field string
	// Reason says what is wrong with it.
	Reason string
}

// Error formats as "grpcflight: Options.<Field>: <Reason>".
func (e *ConfigError) Error() string {
	return "grpcflight: Options." + e.Field + ": " + e.Reason
}

// Layer collapses concurrent identical unary calls of the methods opted in
// through its Cache. Build it with New; it is safe for concurrent use.
type Layer struct {
	opts        Options
	methods     map[string]bool
	keyMetadata []string // lower case, sorted as given
	declared    map[string]bool
	credentials []string // lower case, the undeclared ones only
	// optIn caches each method's decision (string -> bool).
	optIn sync.Map
}

// New validates opts and returns a Layer, or a *ConfigError.
func New(opts Options) (*Layer, error) {
	if opts.Cache == nil {
		return nil, &ConfigError{"Cache", "required (flightcache.New[proto.Message])"}
	}
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if _, err := key.New(opts.Namespace).Build(); err != nil {
		return nil, &ConfigError{"Namespace", err.Error()}
	}
	if opts.Files == nil {
		opts.Files = protoregistry.GlobalFiles
	}
	if opts.Credentials == nil {
		opts.Credentials = DefaultCredentials
	}
	if opts.TTL < 0 {
		return nil, &ConfigError{"TTL", "must not be negative (0: the Cache's TTL)"}
	}
	l := &Layer{opts: opts, methods: map[string]bool{}, declared: map[string]bool{}}
	for _, m := range opts.Methods {
		if _, _, ok := splitMethod(m); !ok {
			return nil, &ConfigError{"Methods", fmt.Sprintf("%q is not a full method name (/package.Service/Method)", m)}
		}
		l.methods[m] = true
	}
	for m, ttl := range opts.MethodTTL {
		if _, _, ok := splitMethod(m); !ok || ttl < 0 {
			return nil, &ConfigError{"MethodTTL", fmt.Sprintf("%q: want a full method name and a TTL >= 0", m)}
		}
	}
	for _, k := range opts.KeyMetadata {
		if k == "" || strings.HasPrefix(k, ":") {
			return nil, &ConfigError{"KeyMetadata", fmt.Sprintf("%q is not a metadata key", k)}
		}
		k = strings.ToLower(k)
		if !l.declared[k] {
			l.declared[k] = true
			l.keyMetadata = append(l.keyMetadata, k)
		}
	}
	for _, k := range opts.Credentials {
		if k = strings.ToLower(k); !l.declared[k] {
			l.credentials = append(l.credentials, k)
		}
	}
	return l, nil
}

// UnaryServerInterceptor returns the server side: the calls of an opted-in
// method that arrive together with the same key run the handler once, and
// each caller gets its own clone of the response.
func (l *Layer) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		msg, ok := req.(proto.Message)
		if !ok || !l.enabled(info.FullMethod) {
			return handler(ctx, req)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		k, ok := l.key(info.FullMethod, msg, md)
		if !ok {
			return handler(ctx, req)
		}
		v, err := l.opts.Cache.Get(ctx, k, func(lctx context.Context) (proto.Message, error) {
			resp, err := handler(lctx, req)
			if err != nil {
				return nil, l.handlerFailed(lctx, err)
			}
			m, ok := resp.(proto.Message)
			if !ok || m == nil {
				return nil, &handlerError{status.Errorf(codes.Internal, "grpcflight: %s returned %T, not a proto.Message", info.FullMethod, resp)}
			}
			l.setTTL(lctx, info.FullMethod)
			return m, nil
		})
		if err != nil {
			return nil, toStatus(ctx, err)
		}
		return proto.Clone(v), nil
	}
}

// UnaryClientInterceptor returns the client side: the calls of an
// opted-in method made together with the same key become one call on the
// connection, and each caller's reply is filled with its own copy of the
// answer. A call with a grpc.PerRPCCredentials, grpc.Header or grpc.Trailer
// option passes straight through: the first carries an identity the key
// cannot see, the others ask for what only the call that went out has.
func (l *Layer) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		msg, ok1 := req.(proto.Message)
		out, ok2 := reply.(proto.Message)
		if !ok1 || !ok2 || !l.enabled(method) || personalCallOption(opts) {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		md, _ := metadata.FromOutgoingContext(ctx)
		k, ok := l.key(method, msg, md)
		if !ok {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		v, err := l.opts.Cache.Get(ctx, k, func(lctx context.Context) (proto.Message, error) {
			fresh := out.ProtoReflect().New().Interface()
			if err := invoker(lctx, method, req, fresh, cc, opts...); err != nil {
				return nil, l.handlerFailed(lctx, err)
			}
			l.setTTL(lctx, method)
			return fresh, nil
		})
		if err != nil {
			return toStatus(ctx, err)
		}
		if got, want := v.ProtoReflect().Descriptor().FullName(), out.ProtoReflect().Descriptor().FullName(); got != want {
			return status.Errorf(codes.Internal, "grpcflight: cached answer of %s is a %s, the reply a %s", method, got, want)
		}
		proto.Reset(out)
		proto.Merge(out, v)
		return nil
	}
}

// personalCallOption reports a call option that makes a call its caller's
// own.
func personalCallOption(opts []grpc.CallOption) bool {
	for _, o := range opts {
		switch o.(type) {
		case grpc.PerRPCCredsCallOption, *grpc.PerRPCCredsCallOption,
			grpc.HeaderCallOption, *grpc.HeaderCallOption,
			grpc.TrailerCallOption, *grpc.TrailerCallOption:
			return true
		}
	}
	return false
}

// setTTL applies the TTL of method on the loader's context.
func (l *Layer) setTTL(lctx context.Context, method string) {
	if ttl, ok := l.opts.MethodTTL[method]; ok && ttl > 0 {
		flightcache.SetTTL(lctx, ttl)
	} else if l.opts.TTL > 0 {
		flightcache.SetTTL(lctx, l.opts.TTL)
	}
}

// handlerError is a handler's (or, on the client, the server's) own error:
// it is returned to the callers unchanged and never cached.
type handlerError struct{ err error }

func (e *handlerError) Error() string { return e.err.Error() }

// notFoundError is a handler's NotFound under Options.CacheNotFound: the
// Cache stores a tombstone for it (it matches flightcache.ErrNotFound),
// and the callers that shared the call get err unchanged.
type notFoundError struct{ err error }

func (e *notFoundError) Error() string        { return e.err.Error() }
func (e *notFoundError) Is(target error) bool { return target == flightcache.ErrNotFound }

// handlerFailed is the loader's error for the handler's err: a
// *handlerError (a *notFoundError for a NotFound under CacheNotFound),
// unless the loader's context ended first (the Cache's LoaderTimeout, or
// its Close), in which case err is the handler's report of the engine's
// decision, and the engine's cause is returned instead.
func (l *Layer) handlerFailed(lctx context.Context, err error) error {
	if lctx.Err() != nil {
		return fmt.Errorf("grpcflight: the shared call ended: %w", context.Cause(lctx))
	}
	if l.opts.CacheNotFound && status.Code(err) == codes.NotFound {
		return &notFoundError{err}
	}
	return &handlerError{err}
}

// toStatus maps an error of the Cache to the caller's status:
//
//   - the caller's own context ended: DeadlineExceeded or Canceled;
//   - the handler's error: unchanged;
//   - a negative answer cached under CacheNotFound: NotFound;
//   - the failure throttle, the breaker, a shared-tier or loader timeout,
//     a closed Cache: Unavailable;
//   - too many waiters or keys in flight: ResourceExhausted;
//   - a panic of the handler: Internal.
func toStatus(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		if errors.Is(cerr, context.DeadlineExceeded) {
			return status.Error(codes.DeadlineExceeded, "grpcflight: "+cerr.Error())
		}
		return status.Error(codes.Canceled, "grpcflight: "+cerr.Error())
	}
	var throttled *flightcache.ThrottledError
	var he *handlerError
	var nf *notFoundError
	var pe *singleflight.PanicError
	switch {
	case errors.As(err, &throttled):
		return status.Error(codes.Unavailable, "grpcflight: "+throttled.Error())
	case errors.As(err, &he):
		return he.err
	case errors.As(err, &nf):
		return nf.err
	case errors.Is(err, flightcache.ErrNotFound):
		return status.Error(codes.NotFound, "grpcflight: not found (a cached negative answer)")
	case errors.As(err, &pe):
		return status.Errorf(codes.Internal, "grpcflight: handler panicked: %v", pe.Value)
	case errors.Is(err, singleflight.ErrTooManyWaiters), errors.Is(err, singleflight.ErrTooManyInFlight):
		return status.Error(codes.ResourceExhausted, "grpcflight: "+err.Error())
	default:
		// The breaker (driver.ErrBreakerOpen), a shared-tier or loader
		// timeout, the Coordinator, a closed Cache: the service cannot
		// answer now, and a retry may succeed.
		return status.Error(codes.Unavailable, "grpcflight: "+err.Error())
	}
}
