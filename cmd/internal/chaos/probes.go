package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// A probe is a short sequence of operations a fault runs besides the
// random workload, aimed at the interleaving that fault makes possible, so
// that a run of a few seconds per fault meets it every time rather than
// by chance. Its operations are recorded and checked like any other. Each
// probe uses a key of its own, in the tenant probeTenant, which the
// random workload never touches: nothing but the probe reads or writes
// it, so nothing else repairs (or hides) what the probe looks for.
type probe struct {
	// before runs just before the fault is injected.
	before func()
	// during runs from the injection (injected) and may go on after the
	// fault is lifted (at lift); it returns early when stop closes. The
	// next fault waits for it.
	during func(stop <-chan struct{}, injected, lift time.Time)
}

// probeTenant is the tenant of the probes' keys.
const probeTenant = "probe"

// probeRead is how often a probe reads its key on each instance while it
// watches for an older value.
const probeRead = 25 * time.Millisecond

// probeFor is the probe of fault, the n-th injected; nil when it has
// none, or none that means anything in this mode or with one instance.
func (p *phase) probeFor(fault string, n int) *probe {
	key := fmt.Sprintf("%s:f%d", probeTenant, n)
	if fault == FaultLeaderKilled || fault == FaultLeaderStopped {
		return p.probeLeader(fault, key, p.target(fault, n))
	}
	if len(p.insts) < 2 {
		return nil
	}
	bus := p.mode != ModeNoBus
	switch fault {
	case FaultSharedRefused:
		if bus {
			return p.probeUnannounced(key, p.target(fault, n))
		}
	case FaultPause:
		if bus {
			return p.probeFrozenWrite(key, n)
		}
	case FaultSlowWrites:
		if !bus {
			return p.probeExpiredCopy(key, p.target(fault, n))
		}
		return p.probeLateWriteBack(key, p.target(fault, n), WriteDelete)
	case FaultScripts + "+" + FaultSlowWrites:
		return p.probeLateWriteBack(key, p.target(fault, n), WriteSet)
	}
	return nil
}

// sleepUntil waits until t, or until stop closes; it reports whether to
// go on.
func sleepUntil(stop <-chan struct{}, t time.Time) bool {
	return pause(stop, max(0, time.Until(t)))
}

// watch reads key on each of insts every probeRead until t (or stop).
func (p *phase) watch(stop <-chan struct{}, key string, insts []*instance, until time.Time) {
	for time.Now().Before(until) {
		for _, in := range insts {
			p.read(in, key)
		}
		if !pause(stop, probeRead) {
			return
		}
	}
}

// others is p.insts without x.
func (p *phase) others(x int) []*instance {
	var out []*instance
	for _, in := range p.insts {
		if in.id != x {
			out = append(out, in)
		}
	}
	return out
}

// probeUnannounced: the other instances read a value instance x wrote,
// then the fault refuses x's shared tier and opens its breaker (x's bus
// stays up), and x writes the key again: its shared update fails and its
// breaker refuses the publish. The redo must announce it soon after the
// fault ends, though no bus goes down and up; the others, which hold the
// older value for the TTL, are watched past the recovery bound.
func (p *phase) probeUnannounced(key string, x int) *probe {
	writer := p.insts[x]
	return &probe{
		before: func() {
			p.write(writer, key, WriteSet)
			for _, in := range p.others(x) {
				p.read(in, key)
			}
		},
		during: func(stop <-chan struct{}, injected, lift time.Time) {
			// Open x's breaker: shared reads of keys it does not hold,
			// each refused at once.
			for j := range 6 {
				p.read(writer, fmt.Sprintf("%s-b%d", key, j))
			}
			p.write(writer, key, WriteSet)
			p.watch(stop, key, p.others(x), injected.Add(cacheTTL))
		},
	}
}

// probeFrozenWrite: the quiet instance writes the key just before Redis
// freezes; while it is frozen, a busy writer (its breaker opened by its
// shared reads timing out) writes the key again, acknowledged though
// neither its shared update nor its publish could be done. When Redis
// resumes with its data, the others' buses come back and empty their
// memory: the writer's redo must remove the entry Redis kept, at once,
// whatever its breaker says. The quiet instance, whose breaker the freeze
// left closed, trusts Redis as soon as it answers, and is watched (with
// the others) until the older entry expires.
func (p *phase) probeFrozenWrite(key string, n int) *probe {
	quiet := p.insts[len(p.insts)-1]
	writer := p.insts[n%(len(p.insts)-1)]
	return &probe{
		before: func() { p.write(quiet, key, WriteSet) },
		during: func(stop <-chan struct{}, injected, lift time.Time) {
			var busy sync.WaitGroup
			for j := range 6 {
				busy.Go(func() { p.read(writer, fmt.Sprintf("%s-b%d", key, j)) })
			}
			// The breaker opens when the shared reads time out; the write
			// comes after that, well within the freeze.
			if !pause(stop, sharedTimeout+50*time.Millisecond) {
				busy.Wait()
				return
			}
			p.write(writer, key, WriteSet)
			busy.Wait()
			if !sleepUntil(stop, lift) {
				return
			}
			// The quiet instance's entry was written at the injection: it
			// expires a TTL later.
			p.watch(stop, key, p.insts, injected.Add(cacheTTL))
		},
	}
}

// probeLateWriteBack: instance x, whose shared writes are slow (and, for
// the combined fault, whose leases fail), loads the key; right after its
// load read the origin, and before its write-back reaches Redis, the next
// instance writes the key (how: a Set or a Delete). Once x's write-back
// has landed, Redis is read raw (in cluster mode an unfenced write-back
// must not have landed), then the writer reads the key (its own write),
// then the others: none may serve the older value x loaded. The race is
// run twice, on two keys, so that one lost to a busy machine's scheduling
// does not leave the fault untested.
func (p *phase) probeLateWriteBack(key string, x int, how string) *probe {
	slow := p.insts[x]
	writer := p.insts[(x+1)%len(p.insts)]
	keys := []string{key + "-1", key + "-2"}
	return &probe{
		during: func(stop <-chan struct{}, injected, lift time.Time) {
			for _, k := range keys {
				if !p.raceWriteBack(stop, k, slow, writer, how) {
					return
				}
			}
			// Past the last slow write-back and one delivery.
			if !pause(stop, slowWriteDelay+deliveryBound+Slack) {
				return
			}
			for range 5 {
				for _, k := range keys {
					p.rawRead(k)
				}
				if !pause(stop, 20*time.Millisecond) {
					return
				}
			}
			readers := append([]*instance{writer}, p.others(writer.id)...)
			for range 3 {
				for _, k := range keys {
					for _, in := range readers {
						p.read(in, k)
					}
				}
				if !pause(stop, 30*time.Millisecond) {
					return
				}
			}
		},
	}
}

// raceWriteBack has slow load key and writer write it (how) between the
// load's read of the origin and its write-back's arrival in Redis, and
// returns once the load's Fetch did; false when stop closed.
func (p *phase) raceWriteBack(stop <-chan struct{}, key string, slow, writer *instance, how string) bool {
	read := make(chan struct{})
	var once sync.Once
	load := func(ctx context.Context) (Value, error) {
		p.org.mu.Lock()
		v := p.org.versions[key]
		p.org.mu.Unlock()
		once.Do(func() { close(read) })
		return valueOf(key, v), nil
	}
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		p.readWith(slow, key, load)
	}()
	select {
	case <-read:
	case <-loaded:
	case <-stop:
		<-loaded
		return false
	}
	// The load has returned and its write-back is on its way: it waits
	// slowWriteDelay before it writes Redis. The write comes in the middle
	// of that wait.
	if !pause(stop, slowWriteDelay/3) {
		<-loaded
		return false
	}
	p.write(writer, key, how)
	<-loaded
	return true
}

// slowLoad is how long probeExpiredCopy's load takes: its write-back's
// entry outlives, by about this much, a copy loaded just after it began.
const slowLoad = 400 * time.Millisecond

// probeExpiredCopy (without a Bus, with three instances or more): instance
// x begins a slow load of the key; a third instance changes the key, and
// the next instance reads the newer value, loading it; x's load then
// writes its older value back, which nothing tells anyone. When the
// reader's copy expires, the older entry is still fresh in Redis: the
// reader, having served the newer version, must not serve the older one
// (monotonic reads), and is watched until that entry expires.
func (p *phase) probeExpiredCopy(key string, x int) *probe {
	if len(p.insts) < 3 {
		return nil
	}
	slow := p.insts[x]
	reader := p.insts[(x+1)%len(p.insts)]
	writer := p.insts[(x+2)%len(p.insts)]
	return &probe{
		during: func(stop <-chan struct{}, injected, lift time.Time) {
			read := make(chan struct{})
			var once sync.Once
			load := func(ctx context.Context) (Value, error) {
				p.org.mu.Lock()
				v := p.org.versions[key]
				p.org.mu.Unlock()
				once.Do(func() { close(read) })
				t := time.NewTimer(slowLoad)
				defer t.Stop()
				select {
				case <-t.C:
				case <-ctx.Done():
					return Value{}, ctx.Err()
				}
				return valueOf(key, v), nil
			}
			loaded := make(chan struct{})
			go func() {
				defer close(loaded)
				p.readWith(slow, key, load)
			}()
			select {
			case <-read:
			case <-stop:
				<-loaded
				return
			}
			p.write(writer, key, WriteDelete)
			p.read(reader, key)
			<-loaded
			p.watch(stop, key, []*instance{reader}, injected.Add(slowLoad+cacheTTL+Slack))
		},
	}
}

// breakersClose bounds how long a leader probe waits for the breakers
// to close: productd's cool-down, and the first call that closes them.
const breakersClose = 8 * time.Second

// breakersClosed waits, up to within or the run's end, until every
// process's /readyz says its Redis breaker is closed, and reports whether
// they all are.
func (p *phase) breakersClosed(within time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	go func() {
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		closed := 0
		for _, in := range p.insts {
			if p.breakerState(ctx, in) == "closed" {
				closed++
			}
		}
		if closed == len(p.insts) {
			return true
		}
		if !pause(ctx.Done(), 20*time.Millisecond) { // polling other processes' state
			return false
		}
	}
}

// probeLeader (ModeProductd): instance x, the workload held off it, alone
// loads a key no one has read; the origin answers its query, then takes
// originLatency more, and while that load is in flight the fault strikes
// x (killed, or frozen past its lease). Meanwhile every other instance
// reads the key: they wait on x's lease until it expires, and one takes
// the load over; then the next instance changes the key (a PUT), and the
// others read it again, which puts the new row in Redis and in their
// memory. Once x is back (started again, or thawed: its load, older than
// the PUT, then tries to write back with a fencing token two steps
// behind, over the new row, which nothing would reload before the TTL),
// Redis is read raw every 10ms and the others read the key, and x too
// once the recovery bound has passed, until the others' copies have
// expired: nothing may serve x's older row, nor let it land in Redis. The
// probe reports (on Progress) whether the fault struck the load and
// another instance took it over.
func (p *phase) probeLeader(fault, key string, x int) *probe {
	leader := p.insts[x]
	var (
		struck  bool
		leading sync.WaitGroup
		taken   float64 // takeovers counted on the others before the fault
	)
	return &probe{
		before: func() {
			// After a Redis fault, productd's breakers stay open for their
			// cool-down (5s): a Get then neither asks for a lease nor
			// waits on one, and the fault would strike a load no one waits
			// for.
			if !p.breakersClosed(breakersClose) {
				select {
				case <-p.stop:
				default:
					p.logf("%s: a breaker still open after %v", fault, breakersClose)
				}
			}
			p.holdOff(leader)
			ctx, cancel := context.WithTimeout(context.Background(), leaderSeen)
			defer cancel()
			queries, ok := p.metric(ctx, leader, originQueriesSample)
			if !ok {
				return
			}
			for _, o := range p.others(x) {
				n, _ := p.metric(ctx, o, takenOverSample)
				taken += n
			}
			leading.Go(func() { p.httpGet(leader, key, false) })
			// The leader's origin query has started when its count moves:
			// nothing else runs on it, its workload held off.
			for ctx.Err() == nil {
				if n, ok := p.metric(ctx, leader, originQueriesSample); ok && n > queries {
					struck = true
					break
				}
				pause(ctx.Done(), 5*time.Millisecond) // polling another process's metrics
			}
			pause(ctx.Done(), queryRan)
		},
		during: func(stop <-chan struct{}, injected, lift time.Time) {
			defer leading.Wait()
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				var now float64
				for _, o := range p.others(x) {
					n, _ := p.metric(ctx, o, takenOverSample)
					now += n
				}
				p.logf("%s: instance %d's load of %s struck: %v; taken over by another instance: %v", fault, x, key, struck, now > taken)
			}()
			others := func() {
				var wg sync.WaitGroup
				for _, o := range p.others(x) {
					wg.Go(func() { p.read(o, key) })
				}
				wg.Wait()
			}
			if len(p.insts) > 1 {
				others() // they wait on x's lease, and one takes it over
				p.write(p.insts[(x+1)%len(p.insts)], key, WritePut)
				others() // the new row, in Redis and in their memory, before x is back
			}
			if !sleepUntil(stop, lift) {
				return
			}
			// Redis is read raw apart from the reads, which may load. x
			// is read only once the recovery bound has passed: its bus
			// comes back and empties its memory, and its reload would
			// repair what its write-back, if unfenced, broke.
			back := time.Now()
			until := back.Add(2 * time.Second)
			var raw sync.WaitGroup
			raw.Go(func() {
				for time.Now().Before(until) {
					p.rawRead(key)
					if !pause(stop, 10*time.Millisecond) {
						return
					}
				}
			})
			defer raw.Wait()
			for time.Now().Before(until) {
				readers := p.others(x)
				if time.Since(back) > BoundsFor(p.mode).Recovery+deliveryBound {
					readers = p.insts // x's reads wait until it is back
				}
				for _, in := range readers {
					p.read(in, key)
				}
				if !pause(stop, probeRead) {
					return
				}
			}
		},
	}
}
