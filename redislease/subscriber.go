package redislease

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// errClosed is returned by a Claim that would wait after Close.
var errClosed = errors.New("redislease: coordinator closed")

// subscriber multiplexes the per-key channels of one instance over one
// subscription connection (per shard on a Cluster: sharded pub/sub lives on
// the master of the channel's slot, so one connection per master). Channels
// are reference-counted: the first waiter subscribes, the last one
// unsubscribes, but never before Redis confirmed the SUBSCRIBE.
type subscriber struct {
	ps      *redis.PubSub
	sharded bool
	done    chan struct{} // closed when the reader returns

	// mu guards chans, and orders SUBSCRIBE and UNSUBSCRIBE of a channel on
	// the connection the way the map changes.
	//
	// Invariant: a channel leaves chans (and is unsubscribed) only once its
	// SUBSCRIBE was confirmed. A confirmation names only the channel, so
	// the late confirmation of a SUBSCRIBE whose waiters all gave up would
	// otherwise open the ready of the channel's next subscription, before
	// Redis has even read its SUBSCRIBE, and that waiter would miss the
	// broadcast it then waits for.
	mu    sync.Mutex
	chans map[string]*channelState
}

// channelState is one subscribed channel.
type channelState struct {
	waiters map[*waiter]struct{}
	// ready is closed when Redis confirmed the subscription: only from then
	// on is a message published to the channel sure to arrive.
	ready     chan struct{}
	confirmed bool
}

// waiter is one Claim's interest in a channel. ch holds at most one
// pending wake-up: a follower only needs to know "look again".
type waiter struct {
	s       *subscriber
	channel string
	ch      chan struct{}
}

// subscribe registers a waiter on channel and returns once Redis confirmed
// the subscription (within the coordinator's timeout).
func (c *Coordinator) subscribe(ctx context.Context, channel string) (*waiter, error) {
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	shard := ""
	if c.cluster != nil {
		m, err := c.cluster.MasterForKey(ctx, channel)
		if err != nil {
			return nil, fmt.Errorf("redislease: subscribe: %w", err)
		}
		shard = m.Options().Addr
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errClosed
	}
	s := c.subs[shard]
	if s == nil {
		s = &subscriber{sharded: c.cluster != nil, done: make(chan struct{}), chans: make(map[string]*channelState)}
		if s.sharded {
			s.ps = c.cluster.SSubscribe(ctx)
		} else {
			s.ps = c.client.Subscribe(ctx)
		}
		c.subs[shard] = s
		// The reader starts after the first SUBSCRIBE (in add), which opens
		// the connection on the channel's shard.
		w, err := s.add(ctx, channel, true)
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return w, w.wait(ctx)
	}
	c.mu.Unlock()
	w, err := s.add(ctx, channel, false)
	if err != nil {
		return nil, err
	}
	return w, w.wait(ctx)
}

func (s *subscriber) add(ctx context.Context, channel string, first bool) (*waiter, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &waiter{s: s, channel: channel, ch: make(chan struct{}, 1)}
	cs := s.chans[channel]
	if cs != nil {
		cs.waiters[w] = struct{}{}
		return w, nil
	}
	cs = &channelState{waiters: map[*waiter]struct{}{w: {}}, ready: make(chan struct{})}
	s.chans[channel] = cs
	var err error
	if s.sharded {
		err = s.ps.SSubscribe(ctx, channel)
	} else {
		err = s.ps.Subscribe(ctx, channel)
	}
	if first {
		go s.read(s.ps.ChannelWithSubscriptions())
	}
	if err != nil {
		delete(s.chans, channel)
		return nil, fmt.Errorf("redislease: subscribe: %w", err)
	}
	return w, nil
}

// wait blocks until the waiter's channel is confirmed; on failure it
// releases the waiter.
func (w *waiter) wait(ctx context.Context) error {
	w.s.mu.Lock()
	ready := w.s.chans[w.channel].ready
	w.s.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		w.release()
		return fmt.Errorf("redislease: subscribe: no confirmation: %w", ctx.Err())
	case <-w.s.done:
		w.release()
		return errClosed
	}
}

// release drops the waiter; the last one of a channel unsubscribes.
func (w *waiter) release() {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.chans[w.channel]
	if cs == nil {
		return
	}
	delete(cs.waiters, w)
	if len(cs.waiters) > 0 || !cs.confirmed {
		// Unconfirmed: the reader unsubscribes the channel when the
		// confirmation arrives, unless a waiter joined it meanwhile.
		return
	}
	delete(s.chans, w.channel)
	s.unsubscribe(w.channel)
}

// unsubscribe ends the subscription of channel. Best effort: a failed
// UNSUBSCRIBE leaves a channel that only costs an ignored message now and
// then. The caller holds s.mu.
func (s *subscriber) unsubscribe(channel string) {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	if s.sharded {
		_ = s.ps.SUnsubscribe(ctx, channel)
	} else {
		_ = s.ps.Unsubscribe(ctx, channel)
	}
}

// read dispatches the connection's traffic until the PubSub is closed:
// confirmations open a channel's ready, messages wake its waiters. go-redis
// reconnects and subscribes again by itself after a connection loss; the
// followers' safety-net re-check covers what was published meanwhile.
func (s *subscriber) read(msgs <-chan any) {
	defer close(s.done)
	for m := range msgs {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" && m.Kind != "ssubscribe" {
				continue
			}
			s.mu.Lock()
			if cs := s.chans[m.Channel]; cs != nil && !cs.confirmed {
				cs.confirmed = true
				close(cs.ready)
				if len(cs.waiters) == 0 { // all gave up before the confirmation
					delete(s.chans, m.Channel)
					s.unsubscribe(m.Channel)
				}
			}
			s.mu.Unlock()
		case *redis.Message:
			s.mu.Lock()
			if cs := s.chans[m.Channel]; cs != nil {
				for w := range cs.waiters {
					select {
					case w.ch <- struct{}{}:
					default: // a wake-up is already pending
					}
				}
			}
			s.mu.Unlock()
		}
	}
}

func (s *subscriber) close() error {
	err := s.ps.Close()
	<-s.done
	return err
}
