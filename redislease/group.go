package redislease

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Group commit of the lease scripts. The acquire, complete, fail and
// heartbeat (extend) scripts of many keys (a Batcher's misses, each in
// its own flight, or a herd of cold misses) would otherwise cost one
// Redis round trip each.
// Instead, per script and per Redis master, a call that finds no call of
// its kind in progress goes at once, alone, on its caller's goroutine: a
// lone Claim pays no window and no extra round trip. Calls that arrive
// while one is in progress wait in a queue and go together, in one
// pipeline (see pipelined), as soon as it returns.
const (
	// maxGroupQueue bounds the calls waiting in one group; a call that
	// finds it full goes alone, as it would without grouping.
	maxGroupQueue = 1024
	// maxGroupPipeline bounds the calls of one pipeline; the rest wait for
	// the next.
	maxGroupPipeline = 256
)

// groupKey names a group: one script, one master ("" outside Redis
// Cluster).
type groupKey struct {
	s    *redis.Script
	node string
}

// scriptGroup is the queue of one script's calls to one master.
type scriptGroup struct {
	c *Coordinator
	s *redis.Script

	mu    sync.Mutex
	busy  bool         // a round trip of the group is in progress; guarded by mu
	queue []*queuedRun // calls waiting for it to return; guarded by mu
}

// queuedRun is one call waiting in a group. cmd is written by the flush
// that sends it, before done is closed.
type queuedRun struct {
	ctx  context.Context // the caller's: once it ends, the call is not sent
	call scriptCall
	cmd  *redis.Cmd
	done chan struct{}
}

// groupFor returns the group of script s for the master of key.
func (c *Coordinator) groupFor(ctx context.Context, s *redis.Script, key string) *scriptGroup {
	gk := groupKey{s: s}
	if c.cluster != nil {
		// The slot map is cached by the client; a master it cannot name
		// (the map is being reloaded) shares the group "".
		if m, err := c.cluster.MasterForKey(ctx, key); err == nil {
			gk.node = m.Options().Addr
		}
	}
	c.groupMu.Lock()
	defer c.groupMu.Unlock()
	g := c.groups[gk]
	if g == nil {
		if c.groups == nil {
			c.groups = make(map[groupKey]*scriptGroup)
		}
		g = &scriptGroup{c: c, s: s}
		c.groups[gk] = g
	}
	return g
}

// runScript runs s on keys with args, as s.Run would, but grouped with
// the concurrent calls of s to the same master (see scriptGroup). ctx
// bounds the caller's wait: a caller whose ctx ends while its call is
// queued gets ctx's error and its call is not sent; once sent, in a
// pipeline shared with others, the pipeline is bounded by Options.Timeout
// alone, so no caller's ctx cuts the others short. Each call gets its own
// answer or error.
func (c *Coordinator) runScript(ctx context.Context, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	g := c.groupFor(ctx, s, keys[0])
	g.mu.Lock()
	if !g.busy {
		g.busy = true
		g.mu.Unlock()
		cmd := s.Run(ctx, c.client, keys, args...)
		g.returned()
		return cmd
	}
	if len(g.queue) >= maxGroupQueue {
		g.mu.Unlock()
		return s.Run(ctx, c.client, keys, args...)
	}
	q := &queuedRun{ctx: ctx, call: scriptCall{keys: keys, args: args}, done: make(chan struct{})}
	g.queue = append(g.queue, q)
	g.mu.Unlock()
	select {
	case <-q.done:
		return q.cmd
	case <-ctx.Done():
		select {
		case <-q.done: // answered meanwhile: a lease granted is not dropped
			return q.cmd
		default:
		}
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(ctx.Err())
		return cmd
	}
}

// returned is called by the holder of g.busy when its round trip
// returned: the queued calls go, in a goroutine of their own so that the
// caller returns at once.
func (g *scriptGroup) returned() {
	g.mu.Lock()
	next := g.take()
	if next == nil {
		g.busy = false
	}
	g.mu.Unlock()
	if next != nil {
		go g.flush(next)
	}
}

// take removes up to maxGroupPipeline calls from the queue, nil when none
// waits. Called with g.mu held.
func (g *scriptGroup) take() []*queuedRun {
	if len(g.queue) == 0 {
		return nil
	}
	n := min(len(g.queue), maxGroupPipeline)
	runs := g.queue[:n:n]
	g.queue = g.queue[n:]
	if len(g.queue) == 0 {
		g.queue = nil // let the taken array go
	}
	return runs
}

// queued reports how many calls wait in g, for tests.
func (g *scriptGroup) queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}

// flush sends runs in one pipeline, and the calls queued meanwhile after
// it, until none waits. It holds g.busy throughout.
func (g *scriptGroup) flush(runs []*queuedRun) {
	for runs != nil {
		live := runs[:0]
		for _, q := range runs {
			if q.ctx.Err() == nil { // a caller that left is not sent
				live = append(live, q)
			}
		}
		if len(live) > 0 {
			calls := make([]scriptCall, len(live))
			for i, q := range live {
				calls[i] = q.call
			}
			ctx, cancel := context.WithTimeout(context.Background(), g.c.timeout)
			cmds := g.c.pipelined(ctx, g.s, calls)
			cancel()
			for i, q := range live {
				q.cmd = cmds[i]
				close(q.done)
			}
		}
		g.mu.Lock()
		runs = g.take()
		if runs == nil {
			g.busy = false
		}
		g.mu.Unlock()
	}
}
