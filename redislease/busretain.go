package redislease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/redislease/internal/buswire"
	"github.com/redis/go-redis/v9"
)

// Retention of bulk invalidations. Pub/sub delivers a message only to the
// subscriptions that exist when it is published, but an InvalidationPrefix,
// InvalidationAll, InvalidationTag or InvalidationTagExpire must reach
// every instance that may still read entries it covers from the shared
// tier: one whose bus was down, one that restarted, one that started
// later. So Publish also records them, and a subscription reads them back
// before every BusUp. A tag invalidation is retained like a prefix one:
// its tag's newest Version, replayed with that Version (never the time of
// the replay), so a late subscriber fences exactly what the writer did.
//
// Each cache has a sorted set in the bus's slot,
//
//	P{bus}|bulk|<cache>
//
// whose members are the kind's letter followed by the target ("p" and the
// prefix, "t" or "e" and the tag, or "a" alone) and whose scores are their Versions in Unix
// microseconds (exact in a float64 until the year 2255); a member keeps its
// newest Version. Publish adds to it, trims it and publishes in one
// script, so a bulk invalidation costs one round trip, and it is stored
// before it is published: a subscription reads the set only once its
// channel is confirmed, so whatever it does not find there arrives as a
// message.
const (
	// DefaultBulkRetention is how long bulk invalidations are kept for
	// replay by default: enough for a Cache whose TTL plus StaleFor is at
	// most 25 hours (a TTL of 24h with StaleFor up to 1h).
	DefaultBulkRetention = 25 * time.Hour

	// MaxBulkRetention is the longest Options.BulkRetention accepted.
	MaxBulkRetention = 30 * 24 * time.Hour

	minBulkRetention = time.Minute
	// maxBulkRetained bounds the set of one cache. Beyond it, the oldest
	// members make way for one InvalidationAll as new as the newest of
	// them: it covers everything they covered (and more), so a late
	// subscriber still drops every entry it must.
	maxBulkRetained = 10000
	// maxReplayBytes bounds the targets one replay reads; a set beyond it
	// is replayed as one InvalidationAll as new as its newest member, for
	// the same reason.
	maxReplayBytes = 16 << 20
)

// bulkKey is the sorted set of cache's retained bulk invalidations.
func (b *bus) bulkKey(cache string) string { return b.channel + "|bulk|" + cache }

// bulkPublishScript: KEYS the cache's set; ARGV member, Version (µs),
// cutoff (µs: members older are dropped), the set's cap, its TTL in ms,
// the bus channel, the message, "1" to SPUBLISH (Redis Cluster). Records
// the invalidation, trims the set by age and by size (see
// maxBulkRetained), then publishes the message. Scores travel as decimal
// strings and go back to Redis as they came, never through a Lua number.
var bulkPublishScript = redis.NewScript(`
local old = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not old or tonumber(old) < tonumber(ARGV[2]) then
	redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[3])
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[4])
if over > 0 then
	local gone = redis.call('ZRANGE', KEYS[1], 0, over, 'WITHSCORES')
	redis.call('ZREMRANGEBYRANK', KEYS[1], 0, over)
	local floor = gone[#gone]
	local a = redis.call('ZSCORE', KEYS[1], 'a')
	if not a or tonumber(a) < tonumber(floor) then
		redis.call('ZADD', KEYS[1], floor, 'a')
	end
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
if ARGV[8] == '1' then
	return redis.call('SPUBLISH', ARGV[6], ARGV[7])
end
return redis.call('PUBLISH', ARGV[6], ARGV[7])
`)

// replayScript: KEYS the cache's set; ARGV cutoff (µs: older members are
// left out), the byte budget. Replies {0, {member, score, ...}} oldest
// first, or {1, score} when the members' bytes exceed the budget: score is
// the newest Version, for one InvalidationAll in their stead.
var replayScript = redis.NewScript(`
local items = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], '+inf', 'WITHSCORES')
local bytes = 0
local budget = tonumber(ARGV[2])
for i = 1, #items, 2 do
	bytes = bytes + #items[i]
	if bytes > budget then
		return {1, items[#items]}
	end
end
return {0, items}
`)

// publishBulk records inv for cache and publishes msg, its encoding.
func (c *Coordinator) publishBulk(ctx context.Context, cache string, inv driver.Invalidation, msg []byte) error {
	b := c.bus
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	sharded := "0"
	if c.cluster != nil {
		sharded = "1"
	}
	member := string(buswire.KindByte(inv.Kind)) + inv.Target
	return bulkPublishScript.Run(ctx, c.client, []string{b.bulkKey(cache)},
		member, inv.Version.UnixMicro(), b.now().Add(-b.retention).UnixMicro(), b.bulkCap,
		ms(b.retention), b.channel, msg, sharded).Err()
}

// errBadRetained is matched by the error of a replay read whose reply is
// not what replayScript returns.
var errBadRetained = errors.New("redislease: bus: malformed reply reading the retained invalidations")

// retained reads cache's bulk invalidations within the retention window,
// oldest first. Members that do not decode (not written by Publish) are
// skipped and counted in BusStats.Dropped.
func (b *bus) retained(ctx context.Context, cache string) ([]driver.Invalidation, error) {
	ctx, cancel := b.c.opCtx(ctx)
	defer cancel()
	cutoff := b.now().Add(-b.retention).UnixMicro()
	v, err := replayScript.Run(ctx, b.c.client, []string{b.bulkKey(cache)}, cutoff, maxReplayBytes).Slice()
	if err != nil {
		return nil, fmt.Errorf("redislease: bus: reading the retained invalidations: %w", err)
	}
	if len(v) != 2 {
		return nil, errBadRetained
	}
	if over, _ := v[0].(int64); over == 1 {
		score, _ := v[1].(string)
		version, ok := parseScore(score)
		if !ok {
			return nil, errBadRetained
		}
		return []driver.Invalidation{{Kind: driver.InvalidationAll, Version: version}}, nil
	}
	items, ok := v[1].([]any)
	if !ok || len(items)%2 != 0 {
		return nil, errBadRetained
	}
	invs := make([]driver.Invalidation, 0, len(items)/2)
	for i := 0; i < len(items); i += 2 {
		member, _ := items[i].(string)
		score, _ := items[i+1].(string)
		inv, ok := decodeRetained(member, score)
		if !ok {
			b.dropped.Add(1)
			continue
		}
		invs = append(invs, inv)
	}
	return invs, nil
}

// decodeRetained decodes one member of a cache's set and its score.
func decodeRetained(member, score string) (driver.Invalidation, bool) {
	var inv driver.Invalidation
	version, ok := parseScore(score)
	if !ok || member == "" {
		return inv, false
	}
	inv.Version = version
	switch member[0] {
	case 'p':
		inv.Kind, inv.Target = driver.InvalidationPrefix, member[1:]
		return inv, inv.Target != "" && len(inv.Target) <= buswire.MaxTarget
	case 'a':
		inv.Kind = driver.InvalidationAll
		return inv, member == "a"
	case 't', 'e':
		inv.Kind, inv.Target = driver.InvalidationTag, member[1:]
		if member[0] == 'e' {
			inv.Kind = driver.InvalidationTagExpire
		}
		return inv, inv.Target != "" && len(inv.Target) <= buswire.MaxTarget
	}
	return inv, false
}

// parseScore reads a score written by bulkPublishScript: a whole number of
// microseconds after 1970, as Redis prints a double.
func parseScore(s string) (time.Time, bool) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1<<53 || f != math.Trunc(f) {
		return time.Time{}, false
	}
	return time.UnixMicro(int64(f)), true
}
