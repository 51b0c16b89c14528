package redislease

import (
	"bytes"
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/redis/go-redis/v9"
)

// heldKey is the context key under which a test gives a Claim its own
// channel, to hear each time that Claim found the lease held by another.
type heldKey struct{}

// heldHook reports, on the channel its context carries, every acquire
// script whose answer was "held by another".
type heldHook struct{}

func (heldHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (heldHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (heldHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		ch, _ := ctx.Value(heldKey{}).(chan struct{})
		if c, ok := cmd.(*redis.Cmd); ok && ch != nil && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
			if v, err := c.Slice(); err == nil && len(v) >= 3 && v[0] == int64(1) {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
		return err
	}
}

// gate holds traffic while shut.
type gate struct {
	mu   sync.Mutex
	open chan struct{} // closed while the gate is open
}

func newGate() *gate {
	g := &gate{open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *gate) shut() { g.mu.Lock(); g.open = make(chan struct{}); g.mu.Unlock() }
func (g *gate) lift() { g.mu.Lock(); close(g.open); g.mu.Unlock() }
func (g *gate) wait() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// pubsubProxy forwards TCP to a Redis server. Once a connection has sent a
// SUBSCRIBE it counts as a subscription connection, whose later SUBSCRIBEs
// wait for up and whose bytes from the server wait for down.
type pubsubProxy struct {
	ln       net.Listener
	target   string
	up, down *gate
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
	subConns []net.Conn // both ends of every subscription connection
}

func startProxy(t *testing.T, target string) *pubsubProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pubsubProxy{ln: ln, target: target, up: newGate(), down: newGate()}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *pubsubProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		var mu sync.Mutex
		sub := false // guarded by mu
		p.wg.Add(2)
		// Bytes from the client: a later SUBSCRIBE, and whatever follows it
		// in the same read, waits for up; what precedes it does not.
		go p.pump(s, c, func(b []byte) (int, *gate) {
			i := bytes.Index(bytes.ToLower(b), []byte("$9\r\nsubscribe\r\n"))
			if i < 0 {
				return 0, nil
			}
			mu.Lock()
			defer mu.Unlock()
			if !sub {
				sub = true
				p.mu.Lock()
				p.subConns = append(p.subConns, c, s)
				p.mu.Unlock()
				return 0, nil // the first SUBSCRIBE itself passes
			}
			return bytes.LastIndexByte(b[:i], '*'), p.up
		})
		go p.pump(c, s, func([]byte) (int, *gate) {
			mu.Lock()
			defer mu.Unlock()
			if sub {
				return 0, p.down
			}
			return 0, nil
		})
	}
}

// pump copies src to dst; gateFor says where in a read to wait, and for
// which gate.
func (p *pubsubProxy) pump(dst, src net.Conn, gateFor func([]byte) (int, *gate)) {
	defer p.wg.Done()
	defer dst.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			at, g := gateFor(buf[:n])
			if g != nil {
				if _, werr := dst.Write(buf[:at]); werr != nil {
					return
				}
				<-g.wait()
			}
			if _, werr := dst.Write(buf[at:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cutSubscriptions closes the subscription connections so far, losing
// whatever the down gate held back on them; the client reconnects.
func (p *pubsubProxy) cutSubscriptions() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.subConns {
		c.Close()
	}
	p.subConns = nil
}

func (p *pubsubProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	// Gates left shut would hold a pump forever.
	for _, g := range []*gate{p.up, p.down} {
		select {
		case <-g.wait():
		default:
			g.lift()
		}
	}
	p.wg.Wait()
}

// A Claim that gave up on its subscription before Redis confirmed it must
// not leave that late confirmation to vouch for the next Claim's
// subscription of the same channel: the next Claim that waits on the key
// is subscribed at the server when it waits, so the leader's broadcast
// reaches it. Here the first confirmation is held back until the first
// Claim timed out, and the connection's later commands are held back
// until the second Claim waits.
func TestALateConfirmationDoesNotVouchForAResubscription(t *testing.T) {
	addr, prefix := sharedRedis(t)
	leader := newInstance(t, newClient(t, addr), prefix, instanceConfig{})
	p := startProxy(t, addr)
	// Timeout bounds each script call and the wait for a confirmation;
	// a second leaves a loaded host room for the scripts.
	in := newInstance(t, newClient(t, p.ln.Addr().String(), heldHook{}), prefix, instanceConfig{lease: Options{Timeout: time.Second}})
	ctx := context.Background()
	lc, err := leader.coord.Claim(ctx, "k", driver.ClaimRequest{Wait: time.Minute})
	if err != nil || lc.Lease == nil {
		t.Fatalf("leader Claim = %+v, %v; want a lease", lc, err)
	}
	k, err := in.coord.keysFor("k")
	if err != nil {
		t.Fatal(err)
	}

	// The first Claim subscribes; Redis's confirmation is held back, so
	// the Claim gives up on it.
	p.down.shut()
	if _, err := in.coord.Claim(ctx, "k", driver.ClaimRequest{Wait: time.Minute}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first Claim = %v, want a subscription timeout", err)
	}

	// The second Claim subscribes the channel again; whatever it sends on
	// the subscription connection is held back from now on.
	p.up.shut()
	held := make(chan struct{}, 1)
	res := make(chan error, 1)
	go func() {
		cl, err := in.coord.Claim(context.WithValue(ctx, heldKey{}, held), "k", driver.ClaimRequest{Wait: time.Minute})
		if err == nil && cl.Done != lc.Lease.Token() {
			err = errors.New("not the leader's completion")
		}
		res <- err
	}()
	waitHeld := func(what string) {
		t.Helper()
		select {
		case <-held:
		case err := <-res:
			t.Fatalf("the second Claim ended (%v) before %s", err, what)
		}
	}
	waitHeld("it found the lease held") // and now subscribes
	s := in.coord.subs[""]
	for waiting := false; !waiting; {
		s.mu.Lock()
		cs := s.chans[k.channel]
		waiting = cs != nil && len(cs.waiters) == 1
		s.mu.Unlock()
		select {
		case err := <-res:
			t.Fatalf("the second Claim ended (%v) before it waited on the channel", err)
		default:
		}
		runtime.Gosched()
	}
	// The late confirmation of the first SUBSCRIBE arrives now.
	p.down.lift()
	waitHeld("its subscription was ready") // it looked at the lease again and waits

	n, err := leader.client.(*redis.Client).PubSubNumSub(ctx, k.channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n[k.channel] != 1 {
		t.Errorf("a Claim waits on the key, but Redis counts %d subscriber(s) of its channel, want 1: the leader's broadcast would be lost", n[k.channel])
	}
	p.up.lift()
	if done, err := lc.Lease.Complete(ctx, nil); err != nil || !done.Written {
		t.Fatalf("Complete = %+v, %v", done, err)
	}
	if err := <-res; err != nil {
		t.Fatalf("second Claim = %v", err)
	}
}

// A channel whose every Claim gave up before Redis confirmed the
// subscription is still unsubscribed, once the confirmation arrives.
func TestAChannelAbandonedBeforeItsConfirmationIsUnsubscribed(t *testing.T) {
	addr, prefix := sharedRedis(t)
	leader := newInstance(t, newClient(t, addr), prefix, instanceConfig{})
	p := startProxy(t, addr)
	in := newInstance(t, newClient(t, p.ln.Addr().String()), prefix, instanceConfig{lease: Options{Timeout: 300 * time.Millisecond}})
	ctx := context.Background()
	lc, err := leader.coord.Claim(ctx, "k", driver.ClaimRequest{Wait: time.Minute})
	if err != nil || lc.Lease == nil {
		t.Fatalf("leader Claim = %+v, %v; want a lease", lc, err)
	}
	defer lc.Lease.Complete(ctx, nil)
	k, err := in.coord.keysFor("k")
	if err != nil {
		t.Fatal(err)
	}
	p.down.shut()
	if _, err := in.coord.Claim(ctx, "k", driver.ClaimRequest{Wait: time.Minute}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Claim = %v, want a subscription timeout", err)
	}
	p.down.lift()
	s := in.coord.subs[""]
	for deadline := time.Now().Add(5 * time.Second); ; runtime.Gosched() {
		s.mu.Lock()
		_, subscribed := s.chans[k.channel]
		s.mu.Unlock()
		if !subscribed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the abandoned channel is still subscribed 5s after its confirmation was let through")
		}
	}
}
