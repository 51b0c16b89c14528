package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/redis/go-redis/v9"
)

// The faults a run injects, each for faultHold unless said otherwise.
const (
	FaultPause        = "redis-paused"     // SIGSTOP, then SIGCONT: Redis comes back with its data
	FaultRestart      = "redis-restarted"  // SIGKILL, then started again empty
	FaultPubSubKilled = "pubsub-killed"    // CLIENT KILL TYPE pubsub: go-redis re-subscribes
	FaultScripts      = "scripts-refused"  // ACL -@scripting for one instance: its leases and bulk invalidations fail, its GET, SET and key invalidations work
	FaultPublish      = "publish-refused"  // ACL -publish -spublish for one instance, briefly (publishHold)
	FaultCodecPanic   = "codec-panics"     // every other Marshal panics
	FaultSlowWrites   = "slow-write-backs" // one instance's shared-tier Sets wait slowWriteDelay first
	// FaultSharedRefused: ACL -@all +@pubsub +@connection for the quiet
	// instance, briefly (sharedRefusedHold): its shared-tier calls fail at
	// once and open its breaker, which then refuses its publishes, while
	// its bus stays up (its heartbeats are PUBLISHes): its writes wait for
	// the redo, with no bus coming back to start it.
	FaultSharedRefused = "shared-refused"
	// FaultLeaderKilled (ModeProductd): the process leading the load of a
	// key no one holds SIGKILLed mid-load, and started again killHold
	// later.
	FaultLeaderKilled = "leader-killed"
	// FaultLeaderStopped (ModeProductd): the process leading the load of a
	// key no one holds SIGSTOPped mid-load for stopHold, past its lease,
	// then SIGCONTed: its load, of the origin as it was, then tries to
	// write back.
	FaultLeaderStopped = "leader-stopped"
)

// allFaults is the schedule's cycle, shuffled per run by its seed. A
// name joined with "+" is several faults at once: an instance whose
// leases fail while write-backs are slow is where an unfenced write-back
// can land after another instance's Set.
var allFaults = []string{FaultPause, FaultRestart, FaultPubSubKilled, FaultScripts, FaultPublish, FaultCodecPanic, FaultSlowWrites,
	FaultScripts + "+" + FaultSlowWrites, FaultSharedRefused}

// processFaults are the faults only ModeProductd's processes allow.
var processFaults = []string{FaultLeaderKilled, FaultLeaderStopped}

// faultsFor is the cycle of mode: without a Bus or a Coordinator (nobus)
// nothing publishes, subscribes or runs a script, so the faults that
// refuse those would change nothing and only take time from the others.
// ModeProductd has no hook in the codec or the shared tier's writes, and
// has the process faults.
func faultsFor(mode string) []string {
	if mode == ModeProductd {
		out := slices.Clone(processFaults)
		for _, f := range allFaults {
			if !strings.Contains(f, FaultCodecPanic) && !strings.Contains(f, FaultSlowWrites) {
				out = append(out, f)
			}
		}
		return out
	}
	if mode != ModeNoBus {
		return slices.Clone(allFaults)
	}
	var out []string
	for _, f := range allFaults {
		switch f {
		case FaultPubSubKilled, FaultPublish, FaultScripts, FaultScripts + "+" + FaultSlowWrites:
			continue
		}
		out = append(out, f)
	}
	return out
}

// faultOrder is mode's cycle shuffled by rng; in ModeProductd the process
// faults come first (shuffled among themselves), so that a short run
// meets the faults the mode exists for.
func faultOrder(mode string, rng *rand.Rand) []string {
	order := faultsFor(mode)
	shuffle := func(s []string) { rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] }) }
	if mode == ModeProductd {
		shuffle(order[:len(processFaults)])
		shuffle(order[len(processFaults):])
		return order
	}
	shuffle(order)
	return order
}

const (
	// faultHold is how long a fault lasts unless said otherwise.
	faultHold = 800 * time.Millisecond
	// pauseHold is how long Redis stays paused: longer than the bus's
	// HeartbeatInterval + DownAfter so that the buses go down, and short
	// next to the TTL, so that an entry written just before the pause is
	// still fresh in Redis well after the recovery bound from its end.
	pauseHold = 700 * time.Millisecond
	// sharedRefusedHold is how long FaultSharedRefused lasts: the redo's
	// backoff (SharedTimeout doubling) tries again within 400ms of its end.
	sharedRefusedHold = 500 * time.Millisecond
	// publishHold is the brief PUBLISH outage: shorter than DownAfter, so
	// that the buses may stay up while some writes go unannounced.
	publishHold = 300 * time.Millisecond
	// restartDown is how long a killed Redis stays away.
	restartDown = time.Second
	// slowWriteDelay delays each shared Set under FaultSlowWrites: below
	// SharedTimeout, so the write lands, late.
	slowWriteDelay = 150 * time.Millisecond
	// calmGap separates a fault's end from the next one's injection:
	// longer than the recovery bound, so that most of a fault's
	// after-effects are over before the next one (a fault's probe may
	// take a little longer), and than the breaker's cool-down.
	calmGap = 1200 * time.Millisecond
	// firstFault is when the first fault is injected: the row "none"
	// holds what happened before.
	firstFault = time.Second
)

// switches are the faults that live in the instances' wrappers.
type switches struct {
	codecPanic atomic.Bool // every instance's codec
}

// panicCodec is the JSON codec, except that while its switch is on every
// other Marshal panics: a codec bug met in a write-back, a lease's
// completion or a Set.
type panicCodec struct {
	on *atomic.Bool
	n  atomic.Uint64
}

func (c *panicCodec) Marshal(v Value) ([]byte, error) {
	if c.on.Load() && c.n.Add(1)%2 == 0 {
		panic("chaos: codec panic injected")
	}
	return json.Marshal(v)
}

func (c *panicCodec) Unmarshal(data []byte) (Value, error) {
	var v Value
	err := json.Unmarshal(data, &v)
	return v, err
}

// slowStore delays every Set while its switch is on, as an instance whose
// writes to the shared tier (write-backs and explicit Sets alike) are
// slow while the others' are not.
type slowStore struct {
	driver.SharedStore
	on *atomic.Bool
}

func (s slowStore) Set(ctx context.Context, key string, e driver.Entry) error {
	if s.on.Load() {
		t := time.NewTimer(slowWriteDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	return s.SharedStore.Set(ctx, key, e)
}

// inject applies fault and returns the function that lifts it. A fault of
// one instance hits instance x.
func (p *phase) inject(ctx context.Context, fault string, x int) (lift func() error, hold time.Duration, err error) {
	user := redisUser(x)
	acl := func(rules ...any) error {
		return p.admin.Do(ctx, append([]any{"ACL", "SETUSER", user}, rules...)...).Err()
	}
	restore := func() error { return acl("+@all") }
	switch fault {
	case FaultPause:
		return func() error { return p.redis.signal(syscall.SIGCONT) }, pauseHold, p.redis.signal(syscall.SIGSTOP)
	case FaultRestart:
		p.redis.kill()
		return p.redis.start, restartDown, nil
	case FaultPubSubKilled:
		return func() error { return nil }, 0, p.admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err()
	case FaultScripts:
		return restore, faultHold, acl("-@scripting")
	case FaultPublish:
		return restore, publishHold, acl("-publish", "-spublish")
	case FaultSharedRefused:
		return restore, sharedRefusedHold, acl("-@all", "+@pubsub", "+@connection")
	case FaultCodecPanic:
		p.sw.codecPanic.Store(true)
		return func() error { p.sw.codecPanic.Store(false); return nil }, faultHold, nil
	case FaultSlowWrites:
		slow := &p.insts[x].slowWrites
		slow.Store(true)
		return func() error { slow.Store(false); return nil }, faultHold, nil
	case FaultLeaderKilled:
		in := p.insts[x]
		p.holdOff(in)
		in.proc.kill()
		return func() error {
			defer p.release(in)
			sctx, cancel := context.WithTimeout(context.Background(), startTimeout)
			defer cancel()
			return in.proc.start(sctx)
		}, killHold, nil
	case FaultLeaderStopped:
		in := p.insts[x]
		p.holdOff(in)
		return func() error {
			defer p.release(in)
			return in.proc.signal(syscall.SIGCONT)
		}, stopHold, in.proc.signal(syscall.SIGSTOP)
	}
	return nil, 0, fmt.Errorf("chaos: unknown fault %q", fault)
}

// holdOff keeps the workload off in until release: it waits for the
// requests in flight on in to end, and holds new ones back. A leader
// probe's before does it before it starts the leader's load; the process
// faults do it too, for a run with no probe. Only the fault goroutine
// calls it.
func (p *phase) holdOff(in *instance) {
	if !in.held {
		in.gate.Lock()
		in.held = true
	}
}

// release lets the workload back on in.
func (p *phase) release(in *instance) {
	if in.held {
		in.held = false
		in.gate.Unlock()
	}
}

// takesBusDown says whether fault (or one of those joined with "+") may
// take an instance's bus down, or keep its writes from being announced
// (its breaker refusing its publishes): see Fault.BusDown.
func takesBusDown(fault string) bool {
	for f := range strings.SplitSeq(fault, "+") {
		switch f {
		case FaultPause, FaultRestart, FaultPubSubKilled, FaultPublish, FaultSharedRefused:
			return true
		case FaultLeaderStopped:
			// The frozen process's heartbeats stop coming back: its bus
			// is down when it thaws, and it hears the writes it missed
			// only then. (A killed one starts with an empty memory.)
			return true
		}
	}
	return false
}

// takesBulkDown says whether fault (or one of those joined with "+") may
// keep bulk invalidations unannounced while every bus stays up: see
// Fault.BulkDown.
func takesBulkDown(fault string) bool {
	for f := range strings.SplitSeq(fault, "+") {
		if f == FaultScripts {
			return true
		}
	}
	return false
}

// injectAll injects each of the faults joined with "+" in fault.
func (p *phase) injectAll(ctx context.Context, fault string, x int) (lift func() error, hold time.Duration, err error) {
	var lifts []func() error
	lift = func() error {
		var errs []error
		for _, l := range lifts {
			errs = append(errs, l())
		}
		return errors.Join(errs...)
	}
	for f := range strings.SplitSeq(fault, "+") {
		l, h, err := p.inject(ctx, f, x)
		if l != nil {
			lifts = append(lifts, l)
		}
		if err != nil {
			return lift, 0, err
		}
		hold = max(hold, h)
	}
	return lift, hold, nil
}

// target is the instance a fault of one instance hits, the n-th fault
// injected: the quiet instance for FaultSharedRefused (a writer's next
// write would redo, by chance, what its probe checks is redone), else
// instance n mod K.
func (p *phase) target(fault string, n int) int {
	if fault == FaultSharedRefused {
		return len(p.insts) - 1
	}
	return n % len(p.insts)
}

// runFaults injects the faults in order, cycling, until stop closes: the
// first at firstFault, each next one calmGap after the previous one
// ended and its probe (see probeFor) finished. A fault in progress is
// always lifted.
func (p *phase) runFaults(stop <-chan struct{}, order []string) error {
	gap := firstFault
	for i := 0; ; i++ {
		if !pause(stop, gap) {
			return nil
		}
		fault := order[i%len(order)]
		pr := p.probeFor(fault, i)
		if pr != nil && pr.before != nil {
			pr.before()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ended := p.h.FaultBegan(fault, takesBusDown(fault), takesBulkDown(fault))
		injected := time.Now()
		lift, hold, err := p.injectAll(ctx, fault, p.target(fault, i))
		if err != nil {
			cancel()
			ended()
			if lift != nil {
				_ = lift()
			}
			return fmt.Errorf("chaos: inject %s: %w", fault, err)
		}
		probed := make(chan struct{})
		go func() {
			defer close(probed)
			if pr != nil && pr.during != nil {
				pr.during(stop, injected, injected.Add(hold))
			}
		}()
		pause(stop, hold) // lifted early when the run stops
		err = lift()
		ended()
		lifted := time.Now()
		cancel()
		<-probed
		p.logf("%v %s", p.h.Now().Round(time.Millisecond), fault)
		if err != nil {
			return fmt.Errorf("chaos: lift %s: %w", fault, err)
		}
		gap = max(0, calmGap-time.Since(lifted))
	}
}

// redisUser is the Redis user instance i connects as, so that an ACL
// fault can hit one instance.
func redisUser(i int) string { return fmt.Sprintf("instance%d", i) }

// adminClient is the fault injector's own connection, as the default user.
func adminClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: 3, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
}
