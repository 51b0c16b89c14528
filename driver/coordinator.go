package driver

import (
	"context"
	"time"
)

// Coordinator extends single-flight across the instances of a service
// (cluster mode): of all the instances that miss a key at once, one loads
// it under a lease and the others wait for its result and read it from the
// shared tier. Package redislease provides one on Redis.
//
// The Cache calls it from inside its own flight, after the double-check of
// the local tier missed (the shared tier's is folded into the Claim, see
// ClaimRequest.Read), so an instance asks the Coordinator at most once per
// key at a time, however many of its callers wait for that key.
// Implementations must be safe for concurrent use.
type Coordinator interface {
	// Claim asks to load key. It returns when this instance may go on:
	//
	//   - Grant.Lease is set: this instance holds the key's lease and must
	//     load it, then end the lease with Complete or Fail.
	//   - Grant.Lease is nil and the error is nil: a load of key by another
	//     instance completed (Grant.Done is its token); its value, if it
	//     stored one, is in the shared tier. If the shared tier has no
	//     fresh value, Claim again with After set to Done, so that the same
	//     completion is not reported twice.
	//   - with ClaimRequest.Read, Grant.Lease nil, Grant.Done 0 and
	//     Grant.Current set: the shared tier held Current and no lease was
	//     taken (read-or-claim). If Current is not fresh enough to serve,
	//     Claim again without Read.
	//   - an error matching flightcache.ErrLeaderFailed: the load failed on the
	//     instance that led it, now or within the failure window.
	//   - an error matching flightcache.ErrCoalesceTimeout: req.Wait passed while
	//     another instance still held the lease.
	//   - any other error: the Coordinator could not be reached; see
	//     flightcache.Options.OnCoordinatorFailure.
	//
	// While it waits, Claim takes the lease over when the holder's lease
	// expires without a result (the holder crashed or stalled); the Lease
	// it then returns has TakenOver set.
	Claim(ctx context.Context, key string, req ClaimRequest) (Grant, error)
	// Invalidate fences key: from now on the write of every load of key in
	// progress on any instance is refused, and a recorded failure of key is
	// forgotten. Cache.Set and Cache.Delete call it before writing the
	// shared tier, which is how an explicit write wins over an older load
	// running on another instance.
	//
	// Every method bounds its own calls to the coordination service; the
	// Cache calls Complete and Fail without a deadline of its own, so that
	// a load that ended at the loader timeout still reports its result.
	Invalidate(ctx context.Context, key string) error
}

// ClaimRequest is what Coordinator.Claim is asked.
type ClaimRequest struct {
	// After is the token of a completion the caller has already seen (0 for
	// none); Claim reports only newer ones.
	After uint64
	// Wait bounds how long Claim waits for another instance's load. Zero
	// (or less) asks for a look: Claim decides on what it finds at once
	// and, when another instance holds the lease, returns an error
	// matching flightcache.ErrCoalesceTimeout without waiting or
	// subscribing to anything. With Read, a look is the Cache's shared
	// read of a Get that missed its local tier: it may read the entry
	// before anything else, since the Cache judges it and claims again
	// (without Read) when it cannot serve it.
	Wait time.Duration
	// Read asks Claim to read the key's shared entry in the same atomic
	// step as each decision it makes (read-or-claim): an entry present
	// when Claim looks is returned in Grant.Current instead of a lease,
	// and a completion's Grant carries the entry the load stored. The
	// Cache then skips the shared reads that would otherwise surround the
	// Claim (its double-check before it, a follower's read after it):
	// one round trip instead of two on a cold miss, and on every wake-up.
	// With Wait 0 it is the Get's own shared read too (a look, see Wait).
	// An implementation that cannot read the tier ignores Read and leaves
	// Grant.Read false; the Cache reads the tier itself.
	Read bool
}

// Grant is Coordinator.Claim's answer: the lease, or word that another
// instance's load completed; see Coordinator.Claim.
type Grant struct {
	// Lease is set when this instance must load the key.
	Lease Lease
	// Done is the fencing token of the completed load, when Lease is nil.
	Done uint64
	// Waited is how long Claim waited for another instance. It is 0 for a
	// completion (Done) that was there at Claim's first look, before it
	// saw any other instance hold the lease: that load ended before this
	// Claim began, and the Cache takes the answer as a read of the shared
	// tier, not as a follower woken by a load it waited for.
	Waited time.Duration
	// Read reports that Claim honoured ClaimRequest.Read: Current is the
	// key's shared entry as read in the step that decided this Grant (nil:
	// the tier held none, or none that passed the store's checks). A
	// Grant with a Lease then has Current nil: the lease is taken only
	// when the tier holds nothing.
	Read bool
	// Current is the key's shared entry, when Read is set; see Read.
	Current *Entry
}

// Lease is one instance's exclusive, time-bounded right to load a key for
// the whole cluster. It is extended in the background while the load runs.
// Exactly one of Complete and Fail must be called, once.
type Lease interface {
	// Token is the lease's fencing token: higher than every token issued
	// for the key before it.
	Token() uint64
	// TakenOver reports that this lease replaced one that expired without
	// a result.
	TakenOver() bool
	// Lost is closed when the lease could not be extended (another instance
	// took over, or the Coordinator was unreachable for the lease's whole
	// TTL). The load goes on; its write will likely be refused.
	Lost() <-chan struct{}
	// Complete writes e (nil: nothing to store) to the shared tier if and
	// only if the lease's token is still the newest for the key (a fenced
	// write), tells the waiting instances the load is done and releases the
	// lease. Its Completion tells whether e was written; when it was
	// refused, because a newer lease, Set or Delete superseded this load,
	// the error is nil.
	Complete(ctx context.Context, e *Entry) (Completion, error)
	// Fail releases the lease and tells the waiting instances the load
	// failed: they return an error matching flightcache.ErrLeaderFailed until the
	// failure window passes. err is this instance's; implementations must
	// not carry its text to other instances (it may hold SQL, host names
	// or secrets, and would reach their callers).
	Fail(ctx context.Context, err error) error
}

// Completion is what Lease.Complete did.
type Completion struct {
	// Written reports that the lease's token was still the newest for the
	// key: the entry given to Complete, if any, was stored.
	Written bool
	// Current is, when the entry was refused, the entry the shared tier
	// held for the key at that moment, read in the same atomic step as
	// the refusal: the newer writer's, which the refused load's callers
	// get instead. Nil when the tier held none, or when the
	// implementation does not read it back; the Cache then reads the
	// shared tier itself.
	Current *Entry
}

// BatchCoordinator is a Coordinator that claims and completes many keys
// per round trip. A Cache whose Coordinator implements it serves the keys
// a batch must load (GetMany, FetchMany) in cluster mode with one
// ClaimMany for all of them and one CompleteMany (or FailMany) per loader
// call, instead of a Claim and a Complete per key; without it, a batch
// loads its keys under no lease and writes them to the local tier only.
// Package redislease implements it: one pipeline per Redis node, so one
// round trip outside Redis Cluster, and at most one per hash slot on one.
//
// ClaimMany never waits: a key that another instance is loading is
// reported Busy, and the Cache waits for it with Claim, exactly as for a
// single key (so the wake-up, the take-over of an expired lease and
// CoalesceWait are the single-key path's). Leases it grants are ordinary
// Leases: each may also be ended alone with its own Complete or Fail.
type BatchCoordinator interface {
	Coordinator
	// ClaimMany looks once at each key, in the order given, and returns
	// one BatchGrant per key, aligned with keys. With read, a key whose
	// shared entry is present is answered with it (BatchGrant.Current)
	// and takes no lease (read-or-claim); without read, the entry is not
	// looked at and a lease is granted whenever no other instance holds
	// one (the Cache claims again without read the keys whose entry it
	// could not serve). err is a failure of the whole call: no key was
	// claimed, or the claimed ones will expire. A key's own failure
	// (a load of it failed within the failure window, a key the store
	// refuses) is its BatchGrant.Err.
	ClaimMany(ctx context.Context, keys []string, read bool) ([]BatchGrant, error)
	// CompleteMany ends leases granted by ClaimMany, each as its own
	// Complete would with entries[i] (nil: store nothing): a fenced write,
	// the wake-up of its followers, the release. The result is aligned
	// with leases; errs, when not nil, is aligned too and holds the keys
	// whose completion failed (their followers find out when the lease
	// expires). Exactly one of Complete, Fail, CompleteMany and FailMany
	// must end each lease.
	CompleteMany(ctx context.Context, leases []Lease, entries []*Entry) ([]Completion, []error)
	// FailMany ends leases granted by ClaimMany as Fail would, each with
	// errs[i] (only its class may leave the instance, see Lease.Fail). It
	// returns the first failure to reach the coordination service.
	FailMany(ctx context.Context, leases []Lease, errs []error) error
}

// BatchGrant is one key's answer from BatchCoordinator.ClaimMany. At most
// one of Lease, Current, Busy and Err is set. None is when read was asked
// and the key's entry was present but failed the store's checks (corrupt,
// expired since): the Cache claims the key again without read.
type BatchGrant struct {
	// Lease is set when this instance must load the key.
	Lease Lease
	// Current is the key's shared entry, when read was asked and the
	// tier held one that passed the store's checks: no lease was taken.
	Current *Entry
	// Busy reports that another instance holds the key's lease: wait for
	// its load with Claim.
	Busy bool
	// Err is the key's own failure: one matching
	// flightcache.ErrLeaderFailed when a load of the key failed within the
	// failure window, or the store's refusal of the key.
	Err error
}
