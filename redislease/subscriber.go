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
	// listener, when set, is the bus: it hears every confirmation and end
	// of the subscription and every message, and keeps the channel
	// subscribed without waiters.
	listener listener
}

// listener receives the traffic of the channels it listens to: every
// confirmation of their subscription (go-redis's silent resubscription
// after a reconnect included), every end of it the server announces, and
// every message, in the order they arrived. Its methods are called from
// the reader, one at a time, and must not block: lease wake-ups go through
// the same reader.
type listener interface {
	subscribed(channel string)
	unsubscribed(channel string)
	message(channel, payload string)
}

// waiter is one Claim's interest in a channel. ch holds at most one
// pending wake-up: a follower only needs to know "look again".
type waiter struct {
	s       *subscriber
	channel string
	ch      chan struct{}
	// lost is set, with a wake-up, when the server ended the channel's
	// subscription (a Cluster moved its slot): the waiter is no longer
	// among the channel's, and its Claim must subscribe again, on the
	// slot's new master, to hear the completion. Guarded by s.mu.
	lost bool
}

// isLost reports whether the server ended the waiter's subscription.
func (w *waiter) isLost() bool {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.lost
}

// subscribe registers a waiter on channel and returns once Redis confirmed
// the subscription (within the coordinator's timeout).
func (c *Coordinator) subscribe(ctx context.Context, channel string) (*waiter, error) {
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	shard, err := c.shardOf(ctx, channel)
	if err != nil {
		return nil, err
	}
	var w *waiter
	if _, err := c.withSubscriber(ctx, shard, func(s *subscriber, first bool) (err error) {
		w, err = s.add(ctx, channel, first)
		return err
	}); err != nil {
		return nil, err
	}
	return w, w.wait(ctx)
}

// shardOf returns the address of the master that serves channel's slot on
// a Cluster, "" otherwise.
func (c *Coordinator) shardOf(ctx context.Context, channel string) (string, error) {
	if c.cluster == nil {
		return "", nil
	}
	m, err := c.cluster.MasterForKey(ctx, channel)
	if err != nil {
		return "", fmt.Errorf("redislease: subscribe: %w", err)
	}
	return m.Options().Addr, nil
}

// withSubscriber runs add on the subscriber of shard, creating it first if
// needed (add is then told first: its SUBSCRIBE opens the connection on
// the shard, and it starts the reader). The subscriber is returned even
// when add failed, if it exists.
func (c *Coordinator) withSubscriber(ctx context.Context, shard string, add func(s *subscriber, first bool) error) (*subscriber, error) {
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
		// Under c.mu, so that no one uses the subscriber before its reader
		// runs.
		err := add(s, true)
		c.mu.Unlock()
		return s, err
	}
	c.mu.Unlock()
	return s, add(s, false)
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
	err := s.subscribeCmd(ctx, channel)
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
	if cs == nil || w.lost {
		return
	}
	delete(cs.waiters, w)
	if len(cs.waiters) > 0 || cs.listener != nil || !cs.confirmed {
		// Unconfirmed: the reader unsubscribes the channel when the
		// confirmation arrives, unless a waiter joined it meanwhile.
		return
	}
	delete(s.chans, w.channel)
	s.unsubscribe(w.channel)
}

// listen subscribes l to channels, which share a slot, with one SUBSCRIBE
// (SSUBSCRIBE on a Cluster); a channel already there is subscribed again,
// which is harmless at the server and confirmed once more. The channels
// stay registered even if the command failed: go-redis subscribes them
// again when it reconnects, and the bus asks again while they are not
// confirmed.
func (s *subscriber) listen(ctx context.Context, l listener, first bool, channels ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range channels {
		cs := s.chans[ch]
		if cs == nil {
			cs = &channelState{waiters: make(map[*waiter]struct{}), ready: make(chan struct{})}
			s.chans[ch] = cs
		}
		cs.listener = l
	}
	err := s.subscribeCmd(ctx, channels...)
	if first {
		go s.read(s.ps.ChannelWithSubscriptions())
	}
	if err != nil {
		return fmt.Errorf("redislease: subscribe: %w", err)
	}
	return nil
}

// unlisten detaches l from channels. As for a channel's last waiter, a
// confirmed channel is unsubscribed now, an unconfirmed one when its
// confirmation arrives.
func (s *subscriber) unlisten(l listener, channels ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range channels {
		cs := s.chans[ch]
		if cs == nil || cs.listener != l {
			continue
		}
		cs.listener = nil
		if len(cs.waiters) > 0 || !cs.confirmed {
			continue
		}
		delete(s.chans, ch)
		s.unsubscribe(ch)
	}
}

// subscribeCmd sends SUBSCRIBE (SSUBSCRIBE on a Cluster). The caller holds
// s.mu.
func (s *subscriber) subscribeCmd(ctx context.Context, channels ...string) error {
	if s.sharded {
		return s.ps.SSubscribe(ctx, channels...)
	}
	return s.ps.Subscribe(ctx, channels...)
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
// confirmations open a channel's ready, messages wake its waiters, and the
// bus's listener hears both. go-redis reconnects and subscribes again by
// itself after a connection loss; the followers' safety-net re-check
// covers what was published meanwhile, and the bus learns of it from the
// new confirmation.
func (s *subscriber) read(msgs <-chan any) {
	defer close(s.done)
	for m := range msgs {
		switch m := m.(type) {
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe":
				if l := s.confirm(m.Channel); l != nil {
					l.subscribed(m.Channel)
				}
			case "unsubscribe", "sunsubscribe":
				if l := s.ended(m.Channel); l != nil {
					l.unsubscribed(m.Channel)
				}
			}
		case *redis.Message:
			s.mu.Lock()
			var l listener
			if cs := s.chans[m.Channel]; cs != nil {
				for w := range cs.waiters {
					select {
					case w.ch <- struct{}{}:
					default: // a wake-up is already pending
					}
				}
				l = cs.listener
			}
			s.mu.Unlock()
			if l != nil {
				l.message(m.Channel, m.Payload)
			}
		}
	}
}

// ended handles the end of channel's subscription: the confirmation of
// an UNSUBSCRIBE this subscriber sent, or the server's own (a Cluster gave
// the channel's slot to another master, and the channel's messages are
// published there from now on). Its waiters are told they lost it and
// woken, so that their Claims look again and subscribe anew; the channel
// is forgotten unless the bus listens to it (the bus moves its channels
// itself). It returns the channel's listener, if any.
func (s *subscriber) ended(channel string) listener {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.chans[channel]
	if cs == nil || !cs.confirmed {
		// Not ours, or an UNSUBSCRIBE's confirmation of a channel
		// subscribed again since: its new confirmation is still to come.
		return nil
	}
	for w := range cs.waiters {
		w.lost = true
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
	clear(cs.waiters)
	if cs.listener == nil {
		delete(s.chans, channel)
		// go-redis still counts the channel as subscribed, and would
		// subscribe it again on this connection after a reconnect.
		s.unsubscribe(channel)
	}
	return cs.listener
}

// confirm records the confirmation of channel's subscription and returns
// its listener, if any.
func (s *subscriber) confirm(channel string) listener {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.chans[channel]
	if cs == nil {
		return nil
	}
	if !cs.confirmed {
		cs.confirmed = true
		close(cs.ready)
		if len(cs.waiters) == 0 && cs.listener == nil { // all gave up before the confirmation
			delete(s.chans, channel)
			s.unsubscribe(channel)
		}
	}
	return cs.listener
}

func (s *subscriber) close() error {
	err := s.ps.Close()
	<-s.done
	return err
}
