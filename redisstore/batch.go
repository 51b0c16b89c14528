package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/redis/go-redis/v9"
)

var _ driver.BatchSharedStore = (*Store)(nil)

// GetMany reads keys in one round trip: one pipeline of the bounded
// GETRANGE that Get sends, which the client sends to each node involved in
// parallel on a Cluster or a Ring. Each answer goes through the same
// checks as Get's, so a key over MaxPayload costs at most MaxPayload+1
// bytes and is repaired, a key of another type is repaired, and a corrupt
// entry, or another key's, is that key's *CorruptError and a miss; the
// other keys are unaffected. An invalid key is that key's error and is not
// sent. A Redis failure of the whole read is returned as err; one that hit
// only some of the commands is their keys' error.
func (s *Store) GetMany(ctx context.Context, keys []string) ([]driver.Lookup, error) {
	out := make([]driver.Lookup, len(keys))
	rks := make([]string, 0, len(keys))
	idx := make([]int, 0, len(keys)) // idx[n]: the index in keys of rks[n]
	for i, k := range keys {
		rk, err := s.redisKey(k)
		if err != nil {
			out[i].Err = err
			continue
		}
		rks = append(rks, rk)
		idx = append(idx, i)
	}
	if len(rks) == 0 {
		return out, nil
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()

	cmds := make([]*redis.StringCmd, len(rks))
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for n, rk := range rks {
			cmds[n] = p.GetRange(ctx, rk, 0, int64(s.maxPayload))
		}
		return nil
	})
	if err != nil && allFailed(cmds) {
		return nil, fmt.Errorf("redisstore: pipelined GETRANGE: %w", err)
	}
	now := time.Now()
	for n, cmd := range cmds {
		i := idx[n]
		payload, err := cmd.Bytes()
		out[i].Entry, out[i].Found, out[i].Err = s.read(ctx, rks[n], payload, err, now)
	}
	return out, nil
}

// allFailed reports whether every command failed other than with
// WRONGTYPE, which is one key's content: then the round trip itself failed.
func allFailed(cmds []*redis.StringCmd) bool {
	for _, c := range cmds {
		if err := c.Err(); err == nil || redis.HasErrorPrefix(err, "WRONGTYPE") {
			return false
		}
	}
	return true
}

// SetMany stores entries[i] under keys[i] with one pipeline of the commands
// Set would send (SET … PX, or DEL for an entry less than a millisecond
// from its StaleUntil): one round trip, or one per node on a Cluster. A key
// whose envelope cannot be built or exceeds MaxPayload is not sent and gets
// Set's typed error; the others are written. It returns nil when every
// write succeeded, else errors aligned with keys.
func (s *Store) SetMany(ctx context.Context, keys []string, entries []driver.Entry) []error {
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(keys))
		}
		errs[i] = err
	}
	if len(entries) != len(keys) {
		err := &EntryError{Reason: fmt.Sprintf("%d entries for %d keys", len(entries), len(keys))}
		for i := range keys {
			fail(i, err)
		}
		return errs
	}
	type write struct {
		i       int
		rk      string
		payload []byte
		ttl     time.Duration // < 1ms: delete instead
	}
	writes := make([]write, 0, len(keys))
	for i, k := range keys {
		rk, err := s.redisKey(k)
		if err != nil {
			fail(i, err)
			continue
		}
		payload, err := s.encode(rk, entries[i])
		if err != nil {
			fail(i, err)
			continue
		}
		if len(payload) > s.maxPayload {
			fail(i, &PayloadTooLargeError{KeyHandle: keyHandle(rk), Size: len(payload), Max: s.maxPayload})
			continue
		}
		// Rounded down, as in Set.
		ttl := time.Until(entries[i].StaleUntil).Truncate(time.Millisecond)
		writes = append(writes, write{i: i, rk: rk, payload: payload, ttl: ttl})
	}
	if len(writes) == 0 {
		return errs
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	cmds := make([]redis.Cmder, len(writes))
	_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for n, w := range writes {
			if w.ttl < time.Millisecond {
				cmds[n] = p.Del(ctx, w.rk)
			} else {
				cmds[n] = p.Set(ctx, w.rk, w.payload, w.ttl)
			}
		}
		return nil
	})
	for n, w := range writes {
		if err := cmds[n].Err(); err != nil {
			fail(w.i, fmt.Errorf("redisstore: pipelined %s: %w", cmds[n].Name(), err))
		}
	}
	return errs
}
