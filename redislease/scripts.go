package redislease

import (
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The scripts. Each touches only the keys of one cache key, which all share
// the store's hash tag, so each runs in one slot of a Redis Cluster. Tokens
// travel as decimal strings: they exceed what a Lua number prints exactly
// with tostring, and string.format('%.0f') is exact below 2^53.
//
// Token invariant: a key's token only grows. Every new token is
// max(previous + 1, the Redis server's clock in microseconds), so it stays
// above every earlier token even after the token key expired or Redis
// restarted empty (the clock has moved on), as long as the server's clock
// does not go back; a fenced write then compares for equality with the
// current token, which no older token can match.
//
// So the token key need not outlive the lease that holds its token: it is
// stored for LeaseTTL, and the holder's heartbeat extends it with the
// lease. Once it expired, a write with any token compares with nothing
// and is refused (fail-closed), and the next token is seeded from the
// clock, at least LeaseTTL (100ms and more) later, so it is above every
// earlier one unless more tokens than the microseconds of LeaseTTL were
// issued ahead of the clock for one key, which Redis cannot run scripts
// fast enough to do. An Invalidate's token, which no lease holds, fences
// the loads in flight while it lives and, once expired, by being absent.

// readLua defines the scripts' readers of keys that anyone with write
// access to Redis may have filled with something else. readValue(k, max)
// is the one way the scripts read a value key: its payload, false when the key is missing, or unreadable
// (a string no envelope can be) without reading it when the key holds
// more than max bytes (the store's MaxPayload) or another type than a
// string. A planted 64 MiB value or a list then costs the script a
// STRLEN, not a copy into the reply, and cannot fail it (WRONGTYPE): the
// store refuses unreadable as it refuses any corrupt payload, and the
// Cache reads the key itself, through redisstore.Store.Get, which deletes
// it and reports it.
const readLua = `
local function readValue(k, max)
	local n = redis.pcall('STRLEN', k)
	if type(n) ~= 'number' or n > tonumber(max) then return '` + unreadable + `' end
	return redis.call('GET', k)
end
-- readMarker(k, numeric): a lease, token or marker key's string, false
-- when it is missing; a key of another type, or one that must be a
-- number and is not, is deleted and read as missing.
local function readMarker(k, numeric)
	local v = redis.pcall('GET', k)
	if type(v) == 'table' or (v and numeric and not tonumber(v)) then
		redis.call('DEL', k)
		return false
	end
	return v
end
`

// unreadable is readValue's answer for a value key it refused to read.
const unreadable = "unreadable"

// nextToken is the Lua that issues a key's next token (the invariant above)
// into the local ts, stored under tokenKey for ttlMS milliseconds: the one
// piece of the acquire and invalidate scripts that must never differ. A
// token key that is not an integer (another type, garbage) is deleted
// first: the token is then seeded from the clock, as after its expiry.
func nextToken(tokenKey, ttlMS string) string {
	return `local t = redis.pcall('INCR', ` + tokenKey + `)
if type(t) ~= 'number' then
	redis.call('DEL', ` + tokenKey + `)
	t = redis.call('INCR', ` + tokenKey + `)
end
local now = redis.call('TIME')
local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
if t < floor then t = floor end
local ts = string.format('%.0f', t)
redis.call('SET', ` + tokenKey + `, ts, 'PX', ` + ttlMS + `)
`
}

// acquireScript: KEYS lease, token, done, fail, value; ARGV lease TTL ms
// (the token key's too), after (a completion token already seen), read
// ("1": read-or-claim, see driver.ClaimRequest.Read; "2": the same, but
// the value key is read first, for a look, see readFirst), the store's
// MaxPayload (see readLua). Replies:
//
//	{0, token}           this caller now holds the lease
//	{1, token, pttl}     another holder; its token and the lease's ms left
//	{2, token[, value]}  a load newer than after completed (done marker),
//	                     with the value key's payload when read is asked
//	                     and the key holds one
//	{3, "token message"} a load failed within the failure window
//	{4, "", value}       read is asked and the value key holds a payload:
//	                     no lease is taken, the caller judges the value
//
// With read, the reads the Cache would make around the acquire (its
// double-check before, a follower's GET after a completion) happen in the
// same atomic step: a cold miss and each wake-up cost one round trip less.
//
// With read "2" (a Get's first look, which stands in for its plain shared
// read) a payload in the value key answers {4} before any marker is read:
// a warm shared hit costs the script one bounded read. That read is
// readValue's, written out before readLua's functions are defined, so a
// warm hit does not even create them (they are closures, made on every
// call); an empty string there reads as a missing key. The Cache judges the payload; when it cannot serve it, it
// claims again without read, and the markers answer then.
var acquireScript = redis.NewScript(`
if ARGV[3] == '2' then
	local n = redis.pcall('STRLEN', KEYS[5])
	if type(n) ~= 'number' or n > tonumber(ARGV[4]) then return {4, '', '` + unreadable + `'} end
	if n > 0 then return {4, '', redis.call('GET', KEYS[5])} end
end
` + readLua + `
local f = readMarker(KEYS[4], false)
if f then return {3, f} end
local d = readMarker(KEYS[3], true)
if d and tonumber(d) > tonumber(ARGV[2]) then
	if ARGV[3] ~= '0' then
		local v = readValue(KEYS[5], ARGV[4])
		if v then return {2, d, v} end
	end
	return {2, d}
end
if ARGV[3] == '1' then
	local v = readValue(KEYS[5], ARGV[4])
	if v then return {4, '', v} end
end
local l = readMarker(KEYS[1], true)
if l then return {1, l, redis.call('PTTL', KEYS[1])} end
` + nextToken("KEYS[2]", "ARGV[1]") + `
redis.call('SET', KEYS[1], ts, 'PX', ARGV[1])
return {0, ts}
`)

// extendScript: KEYS lease, token; ARGV token, lease TTL ms. 1 when the
// lease is still this token's and was extended, with the token key if it
// still holds this token (an Invalidate's newer one is left to expire);
// 0 when the lease is gone or another's.
var extendScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('GET', KEYS[2]) == ARGV[1] then
	redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
`)

// publishLua ends the complete and fail scripts: the message to the
// key's followers, on the key's channel (ARGV[n], the message ARGV[n+1],
// "1" in ARGV[n+2] for SPUBLISH on a Redis Cluster, where the channel
// shares the keys' slot). Publishing inside the script saves the leader a
// round trip per load, and no follower can hear of a completion before it
// is written: the script is atomic.
func publishLua(n int) string {
	a := func(i int) string { return fmt.Sprintf("ARGV[%d]", n+i) }
	return "if " + a(2) + " == '1' then redis.call('SPUBLISH', " + a(0) + ", " + a(1) + ") else redis.call('PUBLISH', " + a(0) + ", " + a(1) + ") end\n"
}

// completeScript: KEYS lease, token, value, done; ARGV token, store ("1"
// to write the value), envelope, value PX ms, done marker PX ms, then the
// channel, the message and the SPUBLISH flag (publishLua), then the
// store's MaxPayload (see readLua). The fenced
// write: the value is stored only while ARGV token is the key's newest
// token. Then the done marker (only for a current token), the release
// (compare-and-delete) and the message. {1} when the token was current;
// when fenced, {0} and, for a refused value, the value key's payload if it
// holds one: the newer writer's entry, read in the same step as the
// refusal, so that the refused leader's callers get it without a second
// round trip that could fail or time out.
var completeScript = redis.NewScript(readLua + `
local current = redis.call('GET', KEYS[2]) == ARGV[1]
if current then
	if ARGV[2] == '1' then
		if tonumber(ARGV[4]) > 0 then
			redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[4])
		else
			redis.call('DEL', KEYS[3])
		end
	end
	redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[5])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
` + publishLua(6) + `
if current then return {1} end
if ARGV[2] == '1' then
	local winner = readValue(KEYS[3], ARGV[9])
	if winner then return {0, winner} end
end
return {0}
`)

// failScript: KEYS lease, token, fail; ARGV token, class, failure window
// ms, then the channel, the message and the SPUBLISH flag (publishLua).
// Records the failure marker (only for a current token), releases the
// lease and publishes.
var failScript = redis.NewScript(`
if redis.call('GET', KEYS[2]) == ARGV[1] then
	redis.call('SET', KEYS[3], ARGV[1] .. ' ' .. ARGV[2], 'PX', ARGV[3])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
` + publishLua(4) + `
return 1
`)

// invalidateScript: KEYS token, done, fail; ARGV lease TTL ms. Issues a new
// token that no lease holds, so every write in flight is fenced, and
// forgets the completion and failure markers. Returns the new token.
var invalidateScript = redis.NewScript(`
` + nextToken("KEYS[1]", "ARGV[1]") + `
redis.call('DEL', KEYS[2], KEYS[3])
return ts
`)
