package redislease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
)

// lease is a held lease. Its heartbeat goroutine extends it every TTL/3
// until Complete or Fail stops it.
type lease struct {
	c         *Coordinator
	k         keys
	token     uint64
	tok       string // token in decimal, as stored
	takenOver bool

	lost     chan struct{} // closed once, by the heartbeat, when the lease is lost
	stop     chan struct{} // closed once, by end, to stop the heartbeat
	stopped  chan struct{} // closed by the heartbeat when it returns
	stopOnce sync.Once
}

var _ driver.Lease = (*lease)(nil)

func (c *Coordinator) startLease(k keys, token uint64, takenOver bool) *lease {
	l := &lease{
		c: c, k: k, token: token, tok: strconv.FormatUint(token, 10), takenOver: takenOver,
		lost: make(chan struct{}), stop: make(chan struct{}), stopped: make(chan struct{}),
	}
	go l.heartbeat()
	return l
}

func (l *lease) Token() uint64         { return l.token }
func (l *lease) TakenOver() bool       { return l.takenOver }
func (l *lease) Lost() <-chan struct{} { return l.lost }

// heartbeat extends the lease, and the token key while it still holds the
// lease's token, every TTL/3. It gives up, closing lost, when
// the lease is no longer this token's, or when no extension succeeded for
// a whole TTL (by then the lease has expired in Redis anyway).
func (l *lease) heartbeat() {
	defer close(l.stopped)
	every := l.c.leaseTTL / 3
	t := time.NewTicker(every)
	defer t.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		ctx, cancel := l.c.opCtx(context.Background())
		n, err := extendScript.Run(ctx, l.c.client, []string{l.k.lease, l.k.token}, l.tok, ms(l.c.leaseTTL)).Int64()
		cancel()
		switch {
		case err == nil && n == 1:
			lastOK = time.Now()
			continue
		case err == nil || time.Since(lastOK) >= l.c.leaseTTL:
			close(l.lost)
			return
		}
	}
}

// end stops the heartbeat and waits for it, so no extension can race the
// release.
func (l *lease) end() {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.stopped
}

// Complete implements driver.Lease: the fenced write, the done marker,
// the release and the broadcast in one script. A refused write's
// Completion carries the entry that refused it, read in the same script.
func (l *lease) Complete(ctx context.Context, e *driver.Entry) (driver.Completion, error) {
	l.end()
	store, payload, px := "0", []byte(nil), int64(0)
	if e != nil {
		_, p, ttl, err := l.c.store.Envelope(l.k.key, *e)
		if err != nil {
			// Nothing is stored, but the followers must still hear the
			// load is over and the lease must go.
			_, _ = l.complete(ctx, "0", nil, 0)
			return driver.Completion{}, err
		}
		store, payload, px = "1", p, ttl.Milliseconds()
	}
	return l.complete(ctx, store, payload, px)
}

func (l *lease) complete(ctx context.Context, store string, payload []byte, px int64) (driver.Completion, error) {
	reply, err := l.c.runScript(ctx, completeScript, []string{l.k.lease, l.k.token, l.k.value, l.k.done},
		l.tok, store, payload, px, ms(l.c.leaseTTL), l.k.channel, "done "+l.tok, l.c.sharded(), l.c.store.MaxPayload()).Slice()
	if err != nil {
		return driver.Completion{}, fmt.Errorf("redislease: complete: %w", err)
	}
	if len(reply) == 0 {
		return driver.Completion{}, fmt.Errorf("redislease: complete: empty reply")
	}
	if reply[0] == int64(1) {
		return driver.Completion{Written: true}, nil
	}
	// Refused. The newer writer's entry, when the key holds one, goes
	// through the store's own checks (its key hash, its times) as a Get
	// would; one that fails them is not handed on, and the Cache reads
	// the tier itself.
	var done driver.Completion
	if len(reply) > 1 && store == "1" {
		if s, ok := reply[1].(string); ok {
			if cur, found, err := l.c.store.OpenEnvelope(l.k.key, []byte(s)); err == nil && found {
				done.Current = &cur
			}
		}
	}
	return done, nil
}

// Fail implements driver.Lease: the failure marker, the release and the
// broadcast in one script. err's text never leaves this instance:
// an origin's error can hold SQL, host names or credentials, and the other
// instances would hand it to their own callers, logs and HTTP responses.
// The marker carries only err's class (see failureClass), and followers
// get one of a few fixed errors matching flightcache.ErrLeaderFailed.
func (l *lease) Fail(ctx context.Context, err error) error {
	l.end()
	ferr := l.c.runScript(ctx, failScript, []string{l.k.lease, l.k.token, l.k.fail}, l.tok, failureClass(err), ms(l.c.failWindow),
		l.k.channel, "fail "+l.tok, l.c.sharded()).Err()
	if ferr != nil {
		return fmt.Errorf("redislease: fail: %w", ferr)
	}
	return nil
}

// The failed load's classes, as the failure marker carries them, and the
// errors followers get for them.
const (
	failedTimeout  = "timeout"   // the load's deadline passed (context.DeadlineExceeded)
	failedNotFound = "not-found" // flightcache.ErrNotFound
	failedError    = "error"     // anything else
)

var (
	errFailedTimeout  = fmt.Errorf("%w: it timed out", flightcache.ErrLeaderFailed)
	errFailedNotFound = fmt.Errorf("%w: not found", flightcache.ErrLeaderFailed)
	errFailedError    = fmt.Errorf("%w: it returned an error", flightcache.ErrLeaderFailed)
)

// failureClass is the class of a failed load's error, the only thing about
// it other instances learn.
func failureClass(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return failedTimeout
	case errors.Is(err, flightcache.ErrNotFound):
		return failedNotFound
	}
	return failedError
}

// leaderFailed is a follower's error for a failure marker's class. A
// marker written by an older version carries the leader's own error text
// instead, which must not reach this instance's callers either: anything
// but a known class is a plain failure.
func leaderFailed(class string) error {
	switch class {
	case failedTimeout:
		return errFailedTimeout
	case failedNotFound:
		return errFailedNotFound
	}
	return errFailedError
}
