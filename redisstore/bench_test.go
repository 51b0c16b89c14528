package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache/driver"
)

// BenchmarkGet compares a Store.Get hit with what a caller would do by hand:
// client.Get(ctx, k).Bytes() and Decode of the same payload. The difference
// is the Store's own overhead (key validation and prefixing, the StaleUntil
// check); both pay one round trip to the real Redis.
func BenchmarkGet(b *testing.B) {
	for _, size := range []int{64, 4096} {
		name := map[int]string{64: "64B", 4096: "4KiB"}[size]
		s, c := newTestStore(b, Options{})
		ctx := context.Background()
		now := time.Now()
		e := driver.Entry{Value: []byte(strings.Repeat("v", size)), Meta: driver.Meta{
			FreshUntil: now.Add(time.Hour), StaleUntil: now.Add(2 * time.Hour), LoadDuration: 5 * time.Millisecond,
		}}
		if err := s.Set(ctx, "bench", e); err != nil {
			b.Fatal(err)
		}
		rawKey := s.Prefix() + "bench"

		b.Run(name+"/Store.Get", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok, err := s.Get(ctx, "bench"); err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
		})
		b.Run(name+"/client.Get+Decode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				payload, err := c.Get(ctx, rawKey).Bytes()
				if err != nil {
					b.Fatal(err)
				}
				if _, err := Decode(rawKey, payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecode isolates the envelope's CPU cost from the network.
func BenchmarkDecode(b *testing.B) {
	now := time.Now()
	for _, size := range []int{64, 4096} {
		payload, err := Encode(testKey, driver.Entry{Value: []byte(strings.Repeat("v", size)), Meta: driver.Meta{
			FreshUntil: now.Add(time.Hour), StaleUntil: now.Add(2 * time.Hour), LoadDuration: 5 * time.Millisecond,
		}})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(map[int]string{64: "64B", 4096: "4KiB"}[size], func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(payload)))
			for b.Loop() {
				if _, err := Decode(testKey, payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
