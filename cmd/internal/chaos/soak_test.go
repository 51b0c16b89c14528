package chaos

import (
	"strings"
	"testing"
	"time"
)

// A healthy soak's history and samples pass; each kind of trouble the soak
// watches for fails it with a message naming it, and only that one.
func TestSoakJudgeTellsEachTroubleApart(t *testing.T) {
	cfg := SoakConfig{Duration: 40 * time.Second, Instances: 2}
	if err := cfg.withDefaults(); err != nil {
		t.Fatal(err)
	}
	// Two hot keys read every 100ms from the warm-up (10s) on, each
	// loaded once per TTL window: 15 windows of 2s, 2 keys each.
	healthy := func() ([]Op, []SoakSample) {
		var ops []Op
		for at := 0; at < 40_000; at += 100 {
			for _, k := range []string{"soak:p0", "soak:p1"} {
				ops = append(ops, read(at%2, k, 1, at, at+5))
			}
		}
		var ss []SoakSample
		for at := 0; at <= 40; at += 5 {
			q := 0.0
			if at > 10 {
				q = float64(at-10) / 2 * 2 // one load per key per 2s
			}
			ss = append(ss, SoakSample{At: time.Duration(at) * time.Second, HeapBytes: 50 << 20, Goroutines: 60, OpenFDs: 40, RedisClients: 10, OriginQueries: q})
		}
		return ops, ss
	}
	cases := []struct {
		name  string
		spoil func(ops []Op, ss []SoakSample) []Op
		want  string // "" for a pass
	}{
		{"healthy", func(ops []Op, _ []SoakSample) []Op { return ops }, ""},
		{"a failed request", func(ops []Op, _ []SoakSample) []Op {
			ops[3].Err = "503 overloaded"
			return ops
		}, "a request failed"},
		{"a slow p99", func(ops []Op, _ []SoakSample) []Op {
			for i := range ops[len(ops)/2:] {
				if i%50 == 0 {
					ops[len(ops)/2+i].End += time.Second
				}
			}
			return ops
		}, "GET p99"},
		{"a growing heap", func(ops []Op, ss []SoakSample) []Op {
			ss[len(ss)-1].HeapBytes = 200 << 20
			return ops
		}, "heap grew"},
		{"leaking goroutines", func(ops []Op, ss []SoakSample) []Op {
			ss[len(ss)-1].Goroutines = 500
			return ops
		}, "goroutines grew"},
		{"leaking connections", func(ops []Op, ss []SoakSample) []Op {
			ss[len(ss)-1].OpenFDs = 400
			return ops
		}, "open descriptors grew"},
		{"an origin that misses its cache", func(ops []Op, ss []SoakSample) []Op {
			ss[len(ss)-1].OriginQueries = 200
			return ops
		}, "origin queries after the warm-up"},
		{"an old value served after a PUT", func(ops []Op, _ []SoakSample) []Op {
			// A PUT of p0's version 2, acknowledged at 20.01s; every later
			// read of p0 sees it but the last, long after.
			w := write(0, "soak:p0", 2, 20_000, 20_010)
			w.Write = WritePut
			last := -1
			for i := range ops {
				if ops[i].Key == "soak:p0" && ops[i].Start > ms(20_010) {
					ops[i].Version, last = 2, i
				}
			}
			ops[last].Version = 1
			return append(ops, w)
		}, "violations of the consistency promises"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ops, ss := healthy()
			r := SoakReport{Config: cfg, Samples: ss}
			r.judge(c.spoil(ops, ss))
			if c.want == "" {
				if !r.Passed() {
					t.Fatalf("a healthy soak failed: %q", r.Failed)
				}
				if r.OriginBudget != 15*2 {
					t.Fatalf("OriginBudget %v, want 30 (15 TTL windows after the warm-up, 2 keys each)", r.OriginBudget)
				}
				var b strings.Builder
				if err := r.WriteText(&b); err != nil || !strings.Contains(b.String(), "passed") {
					t.Fatalf("report: %v\n%s", err, b.String())
				}
				return
			}
			if len(r.Failed) != 1 || !strings.Contains(r.Failed[0], c.want) {
				t.Fatalf("failed checks %q, want exactly one about %q", r.Failed, c.want)
			}
		})
	}
}

// A soak refuses a configuration it cannot run or judge.
func TestSoakConfigRefusesContradictions(t *testing.T) {
	for _, c := range []SoakConfig{
		{Duration: time.Second},
		{Duration: time.Minute, Warmup: 40 * time.Second},
		{Zipf: 1},
		{PutPercent: 60},
		{Workers: -1},
	} {
		if err := c.withDefaults(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
