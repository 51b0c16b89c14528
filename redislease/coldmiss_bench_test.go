package redislease

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// BenchmarkWarmSharedHit measures a Get in cluster mode that the shared
// tier answers: another instance loaded the key, this one keeps no local
// tier (Options.Local nil), so every iteration reads Redis, in both modes:
// plain-get (the default: a bounded GET before the flight) and
// read-in-claim (Options.ReadInClaim: the flight's read-or-claim look).
// latency runs on the shared loopback Redis; redis-cpu on a private redis-server,
// whose INFO commandstats gives Redis's own time per hit (redis-µs/hit:
// the usec of the top-level commands, EVALSHA and GETRANGE, over the
// hits; a script's inner commands are inside its time), beside a plain
// bounded read (Store.Get, GETRANGE) and an empty script (EVALSHA of
// `return 1`) measured the same way: the floor of any script, and the
// look's script alone (look-script: acquire in read mode "2", sent
// directly). usec is time inside Redis by the wall clock: on a loaded
// machine a longer command is more often descheduled mid-way, so compare
// the sub-benchmarks of one run only.
func BenchmarkWarmSharedHit(b *testing.B) {
	b.Run("latency-plain-get", func(b *testing.B) {
		addr, prefix := sharedRedis(b)
		warmHits(b, newClient(b, addr), prefix, Options{})
	})
	b.Run("latency-read-in-claim", func(b *testing.B) {
		addr, prefix := sharedRedis(b)
		warmHits(b, newClient(b, addr), prefix, Options{ReadInClaim: true})
	})
	b.Run("redis-cpu", func(b *testing.B) {
		srv := testenv.StartRedis(b)
		client := newClient(b, srv.Addr)
		ctx := context.Background()
		b.Run("fetch-plain-get", func(b *testing.B) {
			warmHits(b, client, "cpu:", Options{})
			reportRedisCPU(b, client, []string{"evalsha", "getrange"})
		})
		b.Run("fetch-read-in-claim", func(b *testing.B) {
			warmHits(b, client, "cpu:", Options{ReadInClaim: true})
			reportRedisCPU(b, client, []string{"evalsha", "getrange"})
		})
		b.Run("store-get", func(b *testing.B) {
			in := newInstance(b, client, "cpu:", instanceConfig{})
			if _, err := in.cache.Fetch(ctx, "hot", func(context.Context) (string, error) { return "v", nil }); err != nil {
				b.Fatal(err)
			}
			resetStats(b, client)
			for b.Loop() {
				if _, ok, err := in.store.Get(ctx, "hot"); err != nil || !ok {
					b.Fatalf("Store.Get = %v %v", ok, err)
				}
			}
			reportRedisCPU(b, client, []string{"evalsha", "getrange"})
		})
		b.Run("look-script", func(b *testing.B) {
			// The look alone, as the Coordinator sends it for a warm hit
			// (acquire, read mode "2"), without the Cache around it.
			in := newInstance(b, client, "cpu:", instanceConfig{})
			if _, err := in.cache.Fetch(ctx, "hot", func(context.Context) (string, error) { return "v", nil }); err != nil {
				b.Fatal(err)
			}
			k, err := in.coord.keysFor("hot")
			if err != nil {
				b.Fatal(err)
			}
			if err := acquireScript.Load(ctx, client).Err(); err != nil {
				b.Fatal(err)
			}
			resetStats(b, client)
			for b.Loop() {
				v, err := acquireScript.EvalSha(ctx, client, []string{k.lease, k.token, k.done, k.fail, k.value},
					ms(in.coord.leaseTTL), "0", "2", in.store.MaxPayload()).Slice()
				if err != nil || len(v) != 3 || v[0] != int64(4) {
					b.Fatalf("look = %v %v, want the value", v, err)
				}
			}
			reportRedisCPU(b, client, []string{"evalsha", "getrange"})
		})
		b.Run("empty-script", func(b *testing.B) {
			empty := redis.NewScript(`return 1`)
			if err := empty.Load(ctx, client).Err(); err != nil {
				b.Fatal(err)
			}
			resetStats(b, client)
			for b.Loop() {
				if err := empty.EvalSha(ctx, client, nil).Err(); err != nil {
					b.Fatal(err)
				}
			}
			reportRedisCPU(b, client, []string{"evalsha"})
		})
	})
}

// warmHits loads one key on one instance, then times Gets of it on
// another (its Coordinator built with lease) that keeps no local tier:
// each one a warm shared hit.
func warmHits(b *testing.B, client redis.UniversalClient, prefix string, lease Options) {
	ctx := context.Background()
	key := "warm-" + strconv.Itoa(b.N)
	loader := newInstance(b, client, prefix, instanceConfig{})
	load := func(context.Context) (string, error) { return strings.Repeat("v", 100), nil }
	if _, err := loader.cache.Fetch(ctx, key, load); err != nil {
		b.Fatal(err)
	}
	in := newInstance(b, client, prefix, instanceConfig{lease: lease, cache: func(o *flightcache.Options[string]) { o.Local = nil }})
	if r, err := in.cache.Fetch(ctx, key, load); err != nil || r.Outcome != flightcache.OutcomeHitShared {
		b.Fatalf("first Get: %v %v, want a shared hit", r.Outcome, err)
	}
	if c, ok := client.(*redis.Client); ok {
		resetStats(b, c)
	}
	for b.Loop() {
		r, err := in.cache.Fetch(ctx, key, load)
		if err != nil || r.Outcome != flightcache.OutcomeHitShared {
			b.Fatalf("Get: %v %v, want a shared hit", r.Outcome, err)
		}
	}
}

// resetStats clears a private server's command statistics.
func resetStats(b *testing.B, c *redis.Client) {
	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
}

// reportRedisCPU reports, from INFO commandstats, the time Redis spent in
// the top-level commands cmds per iteration, and how many of them ran.
func reportRedisCPU(b *testing.B, c *redis.Client, cmds []string) {
	b.StopTimer()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var usec, calls float64
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range cmds {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
			if !ok {
				continue
			}
			for _, f := range strings.Split(rest, ",") {
				k, v, _ := strings.Cut(f, "=")
				n, _ := strconv.ParseFloat(v, 64)
				switch k {
				case "usec":
					usec += n
				case "calls":
					calls += n
				}
			}
		}
	}
	if calls == 0 {
		b.Fatalf("INFO commandstats shows no call of %v:\n%s", cmds, info)
	}
	b.ReportMetric(usec/float64(b.N), "redis-µs/hit")
	b.ReportMetric(calls/float64(b.N), "cmds/hit")
}

// BenchmarkColdMissLookVsPlainRead measures a cold miss of one instance
// in cluster mode, one at a time, both ways in the same run: plain-get
// (the default: a GET before the flight, then the claim: 3 round trips)
// and read-in-claim (Options.ReadInClaim: the read-or-claim look takes
// the lease: 2).
func BenchmarkColdMissLookVsPlainRead(b *testing.B) {
	for _, tc := range []struct {
		name  string
		lease Options
	}{{"plain-get", Options{}}, {"read-in-claim", Options{ReadInClaim: true}}} {
		b.Run(tc.name, func(b *testing.B) {
			addr, prefix := sharedRedis(b)
			in := newInstance(b, newClient(b, addr), prefix, instanceConfig{lease: tc.lease})
			ctx := context.Background()
			load := func(context.Context) (string, error) { return "v", nil }
			if _, err := in.cache.Fetch(ctx, "warm-up", load); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				i++
				r, err := in.cache.Fetch(ctx, "cold"+strconv.Itoa(i), load)
				if err != nil || r.Outcome != flightcache.OutcomeLoaded {
					b.Fatalf("Fetch = %+v, %v", r, err)
				}
			}
		})
	}
}
