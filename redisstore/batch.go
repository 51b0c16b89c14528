package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/redis/go-redis/v9"
)

var _ driver.BatchSharedStore = (*Store)(nil)

// maxMGetKeys bounds the keys of one MGET: one command of 10,000 keys
// would make Redis build its whole reply, up to 10,000 payloads, in one
// go, holding every other client back meanwhile, and make the client
// buffer it whole; chunks of 512 interleave with other clients' commands
// and still cost one round trip, pipelined.
const maxMGetKeys = 512

// GetMany reads keys in one round trip: MGET on a single Redis (or a
// Sentinel-managed primary), one per 512 keys, pipelined; pipelined GETs on
// a Cluster or a Ring, whose keys may live on different nodes (go-redis
// sends one pipeline per node, so it is one round trip per node involved,
// in parallel). Each payload is decoded exactly as Get decodes it, checked
// against the key it was read under: a corrupt entry, or another key's, is
// that key's *CorruptError and a miss; the other keys are unaffected. An
// invalid key is that key's error and is not sent. A Redis failure of the
// whole read is returned as err; one that hit only some of the MGETs is
// their keys' error.
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

	now := time.Now()
	if _, single := s.client.(*redis.Client); single {
		var cmds []*redis.SliceCmd
		if len(rks) <= maxMGetKeys {
			cmds = []*redis.SliceCmd{s.client.MGet(ctx, rks...)}
		} else {
			cmds = make([]*redis.SliceCmd, 0, (len(rks)+maxMGetKeys-1)/maxMGetKeys)
			_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
				for from := 0; from < len(rks); from += maxMGetKeys {
					cmds = append(cmds, p.MGet(ctx, rks[from:min(from+maxMGetKeys, len(rks))]...))
				}
				return nil
			})
		}
		failed := 0
		for c, cmd := range cmds {
			from := c * maxMGetKeys
			chunk := rks[from:min(from+maxMGetKeys, len(rks))]
			vals, err := cmd.Result()
			if err == nil && len(vals) != len(chunk) {
				err = fmt.Errorf("MGET returned %d values for %d keys", len(vals), len(chunk))
			}
			if err != nil {
				failed++
				if failed == len(cmds) {
					return nil, fmt.Errorf("redisstore: MGET: %w", err)
				}
				for n := range chunk {
					out[idx[from+n]].Err = fmt.Errorf("redisstore: MGET: %w", err)
				}
				continue
			}
			for n, v := range vals {
				i := idx[from+n]
				switch p := v.(type) {
				case nil: // missing
				case string:
					out[i].Entry, out[i].Found, out[i].Err = s.decode(chunk[n], []byte(p), now)
				default:
					out[i].Err = &CorruptError{KeyHandle: keyHandle(chunk[n]), Reason: fmt.Sprintf("MGET returned a %T", v)}
				}
			}
		}
		return out, nil
	}

	// Cluster (keys in different slots) and Ring: no multi-key command,
	// but a pipeline, which the client splits by node.
	cmds := make([]*redis.StringCmd, len(rks))
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for n, rk := range rks {
			cmds[n] = p.Get(ctx, rk)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) && allFailed(cmds) {
		return nil, fmt.Errorf("redisstore: pipelined GET: %w", err)
	}
	for n, cmd := range cmds {
		i := idx[n]
		payload, err := cmd.Bytes()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			out[i].Err = fmt.Errorf("redisstore: GET: %w", err)
		default:
			out[i].Entry, out[i].Found, out[i].Err = s.decode(rks[n], payload, now)
		}
	}
	return out, nil
}

// allFailed reports whether every command failed with something else than
// a missing key: then the round trip itself failed.
func allFailed(cmds []*redis.StringCmd) bool {
	for _, c := range cmds {
		if err := c.Err(); err == nil || errors.Is(err, redis.Nil) {
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
