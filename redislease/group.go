package redislease

import (
	"context"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Group commit of the lease scripts. The acquire, complete and fail
// scripts of many keys (a Batcher's misses, each in its own flight, or a
// herd of cold misses) would otherwise cost one Redis round trip each.
// Heartbeats are not grouped: one per lease every LeaseTTL/3, and a late
// one loses the lease.
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
	call scriptCall
	cmd  *redis.Cmd
	done chan struct{}
	// taken: a flush took the call to send it; from then on its caller
	// waits for the answer (at most Options.Timeout), whatever its ctx,
	// so that a lease Redis grants is never left without an owner.
	// Guarded by scriptGroup.mu.
	taken bool
}

// groupFor returns the group of script s for the master of key, nil when
// the call goes alone: on a client that spreads keys over servers in a way
// a group cannot name (a Ring: its pipelines wait for every shard, so a
// slow one would hold the others), and on a Cluster whose slot map cannot
// name the key's master at the moment (it is being reloaded).
func (c *Coordinator) groupFor(ctx context.Context, s *redis.Script, key string) *scriptGroup {
	gk := groupKey{s: s}
	switch {
	case c.cluster != nil:
		m, err := c.cluster.MasterForKey(ctx, key)
		if err != nil {
			return nil
		}
		gk.node = m.Options().Addr
	default:
		if _, ok := c.client.(*redis.Client); !ok {
			return nil
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

// runScript runs s on keys with args, as s.Run would under ctx bounded by
// Options.Timeout, but grouped with the concurrent calls of s to the same
// master (see scriptGroup). Options.Timeout bounds each round trip from
// the moment it is sent, not the wait in the queue: a caller whose ctx
// ends while its call is queued gets ctx's error and its call is not sent;
// once a flush has taken it, the caller waits for its answer (one
// Options.Timeout at most), so that no script Redis ran, a lease granted
// above all, goes without its caller. The queue is bounded, and each
// pipeline ahead of a call by Options.Timeout, so the wait is too. Each
// call gets its own answer or error.
func (c *Coordinator) runScript(ctx context.Context, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	alone := func() *redis.Cmd {
		octx, cancel := c.opCtx(ctx)
		defer cancel()
		return s.Run(octx, c.client, keys, args...)
	}
	g := c.groupFor(ctx, s, keys[0])
	if g == nil {
		return alone()
	}
	g.mu.Lock()
	if !g.busy {
		g.busy = true
		g.mu.Unlock()
		cmd := alone()
		g.returned()
		return cmd
	}
	if len(g.queue) >= maxGroupQueue {
		g.mu.Unlock()
		return alone()
	}
	q := &queuedRun{call: scriptCall{keys: keys, args: args}, done: make(chan struct{})}
	g.queue = append(g.queue, q)
	g.mu.Unlock()
	select {
	case <-q.done:
		return q.cmd
	case <-ctx.Done():
		g.mu.Lock()
		if !q.taken {
			g.queue = slices.DeleteFunc(g.queue, func(r *queuedRun) bool { return r == q })
			g.mu.Unlock()
			cmd := redis.NewCmd(ctx)
			cmd.SetErr(ctx.Err())
			return cmd
		}
		g.mu.Unlock()
		<-q.done // sent: its answer comes within Options.Timeout
		return q.cmd
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
	for _, q := range runs {
		q.taken = true
	}
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
		calls := make([]scriptCall, len(runs))
		for i, q := range runs {
			calls[i] = q.call
		}
		ctx, cancel := context.WithTimeout(context.Background(), g.c.timeout)
		cmds := g.c.pipelined(ctx, g.s, calls)
		cancel()
		for i, q := range runs {
			q.cmd = cmds[i]
			close(q.done)
		}
		g.mu.Lock()
		runs = g.take()
		if runs == nil {
			g.busy = false
		}
		g.mu.Unlock()
	}
}
