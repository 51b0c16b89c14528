package flightgroup

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"testing"
	"time"
)

// current returns key's registered execution in g, how many callers wait
// on it, and its waves: the channels completion will close, in order. It
// takes the shard's lock.
func current[V any](g *Group[string, V], key string) (c *call[string, V], waiters int, waves []chan struct{}) {
	sh := &g.shards[maphash.Comparable(seed, key)&(shardCount-1)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	c = sh.m[key]
	if c == nil {
		return nil, 0, nil
	}
	waves = append(waves, sh.older[c]...)
	if c.done != nil {
		waves = append(waves, c.done)
	}
	return c, int(c.waiters), waves
}

// TestWaitersAreEnlistedInWaves checks enlist: waiters share a channel per
// waveSize of them, in the order they came, and a fresh execution has no
// older waves.
func TestWaitersAreEnlistedInWaves(t *testing.T) {
	var sh shard[string, int]
	c := &call[string, int]{waiters: 1} // a leader that runs inline: no channel yet
	var got []chan struct{}
	for range 3 * waveSize {
		got = append(got, sh.enlist(c))
	}
	if c.waiters != 3*waveSize+1 {
		t.Fatalf("waiters = %d, want %d", c.waiters, 3*waveSize+1)
	}
	// Waiters 2..63 (the leader is the first of the first wave) share the
	// first channel, the next 64 the second, and so on.
	distinct := map[chan struct{}]int{}
	for i, ch := range got {
		distinct[ch]++
		if i > 0 && ch != got[i-1] && distinct[got[i-1]] > waveSize {
			t.Fatalf("wave of waiter %d holds %d waiters, want at most %d", i, distinct[got[i-1]], waveSize)
		}
	}
	if len(distinct) != 4 {
		t.Fatalf("%d waiters in %d waves, want 4", len(got), len(distinct))
	}
	if older := sh.older[c]; len(older) != 3 || older[0] != got[0] || c.done != got[len(got)-1] {
		t.Fatalf("older waves = %d (first is the first waiter's: %v), newest is the last waiter's: %v; want 3, true, true",
			len(older), len(older) > 0 && older[0] == got[0], c.done == got[len(got)-1])
	}
}

// TestEveryWaveIsReleased: an execution with several waves of waiters,
// some of which leave early, releases every waiter that stayed with its
// result, whichever way it completes (the loader returns, the loader
// timeout fires, Close), for waiters through Do and through Start.
func TestEveryWaveIsReleased(t *testing.T) {
	const waiters = 3*waveSize + 7
	for _, end := range []string{"return", "timeout", "close"} {
		t.Run("end="+end, func(t *testing.T) {
			// The timeout is fired by hand (expire), when every waiter is in.
			g := New[string, int](WithLoaderTimeout(time.Hour))
			defer g.Close()
			release := make(chan struct{})
			defer func() {
				select {
				case <-release:
				default:
					close(release)
				}
			}()
			loading := make(chan struct{})
			fn := func(ctx context.Context) (int, error) {
				close(loading)
				<-release
				return 42, nil
			}
			var leader sync.WaitGroup
			leader.Go(func() { g.Do(context.Background(), "k", fn) }) // waits in the first wave
			<-loading
			type answer struct {
				v    int
				err  error
				left bool
			}
			answers := make([]answer, waiters)
			leave := make([]context.CancelFunc, waiters)
			var wg sync.WaitGroup
			for i := range waiters {
				ctx := context.Background()
				if i%2 == 1 { // cancellable; one in five leaves early
					ctx, leave[i] = context.WithCancel(ctx)
				}
				wg.Go(func() {
					a := answer{left: i%5 == 1}
					if i%3 == 0 {
						f, err := g.Start(ctx, "k")
						if err != nil {
							t.Errorf("Start: %v", err)
							return
						}
						a.v, _, a.err = f.Wait(ctx)
					} else {
						a.v, _, a.err = g.Do(ctx, "k", fn)
					}
					answers[i] = a
				})
			}
			// Every waiter is in before any leaves or the execution ends.
			var c *call[string, int]
			for {
				var n int
				var waves []chan struct{}
				c, n, waves = current(g, "k")
				if c == nil {
					t.Fatal("the execution ended early")
				}
				if n == waiters+1 {
					if len(waves) < 4 {
						t.Fatalf("%d waiters in %d waves, want at least 4", n, len(waves))
					}
					break
				}
				time.Sleep(time.Millisecond)
			}
			for i, cancel := range leave {
				if cancel != nil && i%5 == 1 {
					cancel()
				}
			}
			want, wantErr := 42, error(nil)
			switch end {
			case "return":
				close(release)
			case "timeout":
				g.expire(c)
				want, wantErr = 0, context.DeadlineExceeded
			case "close":
				g.Close()
				want, wantErr = 0, ErrClosed
			}
			wg.Wait()
			leader.Wait()
			for i, a := range answers {
				// One that left may still have seen the end first.
				if a.left && errors.Is(a.err, context.Canceled) {
					continue
				}
				if a.v != want || !errors.Is(a.err, wantErr) {
					t.Errorf("waiter %d (left: %v): (%d, %v), want (%d, %v)", i, a.left, a.v, a.err, want, wantErr)
				}
			}
			for _, cancel := range leave {
				if cancel != nil {
					cancel()
				}
			}
			// A finished execution leaves no waves behind.
			for i := range g.shards {
				sh := &g.shards[i]
				sh.mu.Lock()
				n := len(sh.older)
				sh.mu.Unlock()
				if n != 0 {
					t.Errorf("shard %d still holds the waves of %d executions", i, n)
				}
			}
		})
	}
}
