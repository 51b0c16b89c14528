// Package grpcflight collapses concurrent identical unary gRPC calls
// through a flightcache.Cache: the calls of an opted-in method that arrive
// together with the same key run the handler once (server side) or go out
// once (client side), on this instance or, with the Cache's Coordinator
// (package redislease), in the whole fleet that shares Redis, and the
// answer is served from the Cache's tiers until its TTL ends.
//
//	layer, err := grpcflight.New(grpcflight.Options{Cache: responses, NoSideEffects: true})
//	...
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(layer.UnaryServerInterceptor()))
//
// # Which calls
//
// Only the methods opted in: those Options.Methods names, and, with
// Options.NoSideEffects, those whose descriptor declares
//
//	option idempotency_level = NO_SIDE_EFFECTS;
//
// (looked up in Options.Files, protoregistry.GlobalFiles by default, where
// generated code registers its files). Every other call passes straight
// through, as do streaming calls, which these interceptors never see.
//
// # The key
//
// The full method, the request encoded deterministically
// (proto.MarshalOptions{Deterministic: true}) and the values of the
// metadata keys Options.KeyMetadata declares, through package key; the
// request and the metadata enter as SHA-256 digests, so that neither a
// request nor a credential is written in a shared tier's keys.
//
// # Cache poisoning and tenant isolation
//
// A call is answered with the answer to every call that shares its key.
// Every metadata key the handler reads that changes its answer (a tenant,
// a locale, a feature flag, the caller's identity for a per-user answer)
// must be declared in Options.KeyMetadata; an undeclared one means one
// caller's answer is served to another. As a safe default, a call that
// carries one of Options.Credentials (DefaultCredentials: authorization,
// cookie, ...) that is not declared passes straight through: declare
// authorization to share answers among the calls of one identity, or
// leave it undeclared when the answer depends on it and must not be
// shared. On the client, a call with a grpc.PerRPCCredentials option
// passes through too; credentials set on the connection (grpc.WithPerRPC-
// Credentials) are invisible to the interceptor, so a Cache shared by
// connections of different identities needs a Namespace per identity. A
// peer's TLS identity is not in the key either: a handler whose answer
// depends on it must not be opted in.
//
// # Values
//
// The Cache holds one message per key; every caller gets its own copy
// (proto.Clone on the server, proto.Merge into the reply on the client),
// so a caller that changes its response changes no one else's. Headers and
// trailers the handler sets reach the call that ran it only, and a client
// call with grpc.Header or grpc.Trailer passes through. Codec stores the
// messages in a shared tier.
//
// # Errors
//
// A handler's own error reaches the callers that shared its call
// unchanged and is never cached, except a NotFound under
// Options.CacheNotFound, which is kept for the Cache's NegativeTTL. The
// Cache's errors become status codes:
//
//   - the caller's own deadline: DeadlineExceeded; its cancellation:
//     Canceled (the shared call goes on for the others);
//   - the Cache's LoaderTimeout, a shared-tier timeout, the breaker, the
//     failure throttle, a closed Cache: Unavailable;
//   - too many waiters on one key (the Cache's MaxWaiters) or keys in
//     flight: ResourceExhausted;
//   - a panic of the handler: Internal (the process keeps running).
//
// # Freshness
//
// Options.TTL (per method: Options.MethodTTL) is how long an answer is
// fresh, the Cache's TTL by default. The Cache's StaleFor and SoftTimeout
// serve an answer past its TTL when the handler fails or is slow.
package grpcflight
