package redislease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/flightcache/flightcache/driver"
	"github.com/redis/go-redis/v9"
)

var _ driver.BatchCoordinator = (*Coordinator)(nil)

// claimBatchScript is ClaimMany's look at one key: the acquire script
// without the wait's bookkeeping (no completion token to compare, the
// batch claims afresh). KEYS lease, token, fail, value; ARGV lease TTL ms
// (the token key's too), read ("1": read-or-claim), the store's
// MaxPayload (see readLua). Replies:
//
//	{0, token}      this caller now holds the lease
//	{1, token}      another instance holds it
//	{3, "token class"} a load failed within the failure window
//	{4, "", value}  read is asked and the value key holds a payload: no
//	                lease is taken, the caller judges the value
//
// It is kept apart from acquireScript, which a single key's Claim runs in
// a loop with its own replies; ClaimMany sends one per key, pipelined.
var claimBatchScript = redis.NewScript(claimBatchLua)

// claimBatchLua is claimBatchScript's text.
var claimBatchLua = readLua + `
local f = readMarker(KEYS[3], false)
if f then return {3, f} end
if ARGV[2] == '1' then
	local v = readValue(KEYS[4], ARGV[3])
	if v then return {4, '', v} end
end
local l = readMarker(KEYS[1], true)
if l then return {1, l} end
` + nextToken("KEYS[2]", "ARGV[1]") + `
redis.call('SET', KEYS[1], ts, 'PX', ARGV[1])
return {0, ts}
`

// scriptCall is one script call of a pipeline.
type scriptCall struct {
	keys []string
	args []any
}

// pipelined runs s once per call in one pipeline: one round trip outside
// Redis Cluster, one per master holding the calls' slots on a Cluster
// (go-redis routes each EVALSHA by its first key, and every key of a call
// shares its cache key's hash tag). The result is aligned with calls;
// each command carries its own error. Calls refused with NOSCRIPT (the
// server's script cache was flushed, or a master never saw the script)
// did not run: they alone are sent again, with the script's text.
func (c *Coordinator) pipelined(ctx context.Context, s *redis.Script, calls []scriptCall) []*redis.Cmd {
	run := func(idx []int, sha bool, cmds []*redis.Cmd) {
		pipe := c.client.Pipeline()
		for _, i := range idx {
			if sha {
				cmds[i] = s.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
			} else {
				cmds[i] = s.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
			}
		}
		_, _ = pipe.Exec(ctx) // each command keeps its own error
	}
	cmds := make([]*redis.Cmd, len(calls))
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	run(all, true, cmds)
	var again []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		run(again, false, cmds)
	}
	return cmds
}

// ClaimMany implements driver.BatchCoordinator: one claimBatchScript per
// key, all in one pipeline (see pipelined). A key the store refuses, or
// whose call failed, gets its own BatchGrant.Err; err is set only when
// every call failed, so a batch spread over a Cluster with one master
// down still claims the keys of the others.
func (c *Coordinator) ClaimMany(ctx context.Context, names []string, read bool) ([]driver.BatchGrant, error) {
	grants := make([]driver.BatchGrant, len(names))
	ks := make([]keys, 0, len(names))
	idx := make([]int, 0, len(names))
	calls := make([]scriptCall, 0, len(names))
	readArg := "0"
	if read {
		readArg = "1"
	}
	for i, name := range names {
		k, err := c.keysFor(name)
		if err != nil {
			grants[i].Err = err
			continue
		}
		ks, idx = append(ks, k), append(idx, i)
		calls = append(calls, scriptCall{keys: []string{k.lease, k.token, k.fail, k.value},
			args: []any{ms(c.leaseTTL), readArg, c.store.MaxPayload()}})
	}
	if len(calls) == 0 {
		return grants, nil
	}
	pctx, cancel := c.opCtx(ctx)
	cmds := c.pipelined(pctx, claimBatchScript, calls)
	cancel()
	failed := 0
	var first error
	for n, cmd := range cmds {
		g := &grants[idx[n]]
		v, err := cmd.Slice()
		if err == nil && len(v) < 2 {
			err = errors.New("malformed reply")
		}
		if err != nil {
			g.Err = fmt.Errorf("redislease: claim many: %w", err)
			failed++
			if first == nil {
				first = g.Err
			}
			continue
		}
		kind, _ := v[0].(int64)
		s, _ := v[1].(string)
		switch kind {
		case 0:
			tok, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				// The lease is taken but unusable: it expires.
				g.Err = fmt.Errorf("redislease: claim many: malformed token: %w", err)
				continue
			}
			g.Lease = c.startLease(ks[n], tok, false)
		case 1:
			g.Busy = true
		case 3:
			_, class, _ := strings.Cut(s, " ")
			g.Err = leaderFailed(class)
		case 4:
			if len(v) < 3 {
				g.Err = errors.New("redislease: claim many: malformed reply")
				continue
			}
			p, _ := v[2].(string)
			// Through the store's own checks, as a Get would; a payload
			// they refuse leaves the grant empty: claim without read.
			if cur, ok := c.current(ks[n], acquireReply{payload: []byte(p), hasVal: true}); ok && cur != nil {
				g.Current = cur
			}
		default:
			g.Err = fmt.Errorf("redislease: claim many: unknown reply %d", kind)
		}
	}
	if failed == len(cmds) { // every call failed: no lease was granted
		return nil, first
	}
	return grants, nil
}

// batchLease checks that l is a lease of c and stops its heartbeat, so
// no extension races its end.
func (c *Coordinator) batchLease(l driver.Lease) (*lease, error) {
	rl, ok := l.(*lease)
	if !ok || rl.c != c {
		return nil, errors.New("redislease: a lease this coordinator did not grant")
	}
	rl.end()
	return rl, nil
}

// CompleteMany implements driver.BatchCoordinator: each lease's complete
// script (the fenced write, the done marker, the release and the
// wake-up of its followers, in one atomic step per key), all in one
// pipeline.
func (c *Coordinator) CompleteMany(ctx context.Context, leases []driver.Lease, entries []*driver.Entry) ([]driver.Completion, []error) {
	done := make([]driver.Completion, len(leases))
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(leases))
		}
		errs[i] = err
	}
	var (
		calls  []scriptCall
		idx    []int
		ls     []*lease
		stored []bool
	)
	for i, dl := range leases {
		l, err := c.batchLease(dl)
		if err != nil {
			fail(i, err)
			continue
		}
		store, payload, px := "0", []byte(nil), int64(0)
		if e := entries[i]; e != nil {
			if _, p, ttl, err := c.store.Envelope(l.k.key, *e); err != nil {
				// Nothing is stored, but the followers must still hear the
				// load is over and the lease must go (as Complete does).
				fail(i, err)
			} else {
				store, payload, px = "1", p, ttl.Milliseconds()
			}
		}
		calls = append(calls, scriptCall{keys: []string{l.k.lease, l.k.token, l.k.value, l.k.done},
			args: []any{l.tok, store, payload, px, ms(c.leaseTTL), l.k.channel, "done " + l.tok, c.sharded(), c.store.MaxPayload()}})
		idx, ls, stored = append(idx, i), append(ls, l), append(stored, store == "1")
	}
	if len(calls) == 0 {
		return done, errs
	}
	pctx, cancel := c.opCtx(ctx)
	cmds := c.pipelined(pctx, completeScript, calls)
	cancel()
	for n, cmd := range cmds {
		i := idx[n]
		reply, err := cmd.Slice()
		if err == nil && len(reply) == 0 {
			err = errors.New("empty reply")
		}
		if err != nil {
			fail(i, fmt.Errorf("redislease: complete many: %w", err))
			continue
		}
		if reply[0] == int64(1) {
			// The token was current: the entry, if any, is stored
			// (unless it could not be enveloped: errs[i]).
			done[i].Written = errs == nil || errs[i] == nil
			continue
		}
		// Refused: the newer writer's entry, through the store's checks
		// (see lease.complete).
		if len(reply) > 1 && stored[n] {
			if s, ok := reply[1].(string); ok {
				if cur, found, err := c.store.OpenEnvelope(ls[n].k.key, []byte(s)); err == nil && found {
					done[i].Current = &cur
				}
			}
		}
	}
	return done, errs
}

// FailMany implements driver.BatchCoordinator: each lease's fail script
// (the failure marker with only the error's class, the release, the
// wake-up), all in one pipeline.
func (c *Coordinator) FailMany(ctx context.Context, leases []driver.Lease, errs []error) error {
	var (
		calls []scriptCall
		first error
	)
	for i, dl := range leases {
		l, err := c.batchLease(dl)
		if err != nil {
			first = firstOf(first, err)
			continue
		}
		calls = append(calls, scriptCall{keys: []string{l.k.lease, l.k.token, l.k.fail},
			args: []any{l.tok, failureClass(errs[i]), ms(c.failWindow), l.k.channel, "fail " + l.tok, c.sharded()}})
	}
	if len(calls) == 0 {
		return first
	}
	pctx, cancel := c.opCtx(ctx)
	cmds := c.pipelined(pctx, failScript, calls)
	cancel()
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			first = firstOf(first, fmt.Errorf("redislease: fail many: %w", err))
		}
	}
	return first
}

// cmp keeps the first error.
func firstOf(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
