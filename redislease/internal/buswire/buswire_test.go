package buswire

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache/driver"
)

// randomInvalidation returns a well-formed invalidation, with arbitrary
// bytes in the cache name and the target.
func randomInvalidation(r *rand.Rand) (string, driver.Invalidation) {
	bytesOf := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		return string(b)
	}
	lengths := []int{1, 2, 17, 255, 1024, MaxTarget}
	cache := bytesOf(1 + r.IntN(MaxCache))
	inv := driver.Invalidation{
		Kind:    driver.InvalidationKind(1 + r.IntN(5)),
		Version: time.UnixMicro(r.Int64N(1 << 62)),
	}
	if inv.Kind != driver.InvalidationAll {
		inv.Target = bytesOf(lengths[r.IntN(len(lengths))])
	}
	return cache, inv
}

// Whatever the Coordinator publishes decodes to what it published, with
// the Version to the microsecond.
func TestBusMessageRoundTrips(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	now := time.Now()
	cases := []struct {
		cache string
		inv   driver.Invalidation
	}{
		{"product", driver.Invalidation{Kind: driver.InvalidationKey, Target: "product:42", Version: now}},
		{"c", driver.Invalidation{Kind: driver.InvalidationPrefix, Target: "tenant-a:", Version: now}},
		{"c", driver.Invalidation{Kind: driver.InvalidationAll, Version: time.UnixMicro(0)}},
		{"c", driver.Invalidation{Kind: driver.InvalidationTag, Target: "product:42", Version: now}},
		{"c", driver.Invalidation{Kind: driver.InvalidationTagExpire, Target: "category:tea", Version: now}},
		{"k with spaces: and {braces}", driver.Invalidation{Kind: driver.InvalidationKey, Target: "fc1 0000000000000000 k 1 1:x", Version: now}},
	}
	for range 2000 {
		c, inv := randomInvalidation(r)
		cases = append(cases, struct {
			cache string
			inv   driver.Invalidation
		}{c, inv})
	}
	for i, c := range cases {
		origin := r.Uint64()
		msg, err := Append(nil, origin, c.cache, c.inv)
		if err != nil {
			t.Fatalf("case %d: encode: %v", i, err)
		}
		if len(msg) > MaxMessage {
			t.Fatalf("case %d: %d bytes, above the %d the decoder accepts", i, len(msg), MaxMessage)
		}
		m, err := Decode(string(msg))
		if err != nil {
			t.Fatalf("case %d: decode: %v", i, err)
		}
		if m.Origin != origin || m.Cache != c.cache || m.Inv.Kind != c.inv.Kind || m.Inv.Target != c.inv.Target ||
			!m.Inv.Version.Equal(c.inv.Version.Truncate(time.Microsecond)) {
			t.Fatalf("case %d: decoded %x %q %v %d bytes %v, want %x %q %v %d bytes %v", i,
				m.Origin, m.Cache, m.Inv.Kind, len(m.Inv.Target), m.Inv.Version,
				origin, c.cache, c.inv.Kind, len(c.inv.Target), c.inv.Version)
		}
	}
	msg, _ := Append(nil, 0xfedcba9876543210, "product", driver.Invalidation{Kind: driver.InvalidationKey, Target: "product:42", Version: time.UnixMicro(1764524459123456)})
	if want := "fc1 fedcba9876543210 k 1764524459123456 7:productproduct:42"; string(msg) != want {
		t.Fatalf("encoding = %q, want %q", msg, want)
	}
}

// What cannot be published is refused, without quoting it.
func TestBusMessageRefusesWhatCannotBeDecoded(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name  string
		cache string
		inv   driver.Invalidation
	}{
		{"empty cache", "", driver.Invalidation{Kind: driver.InvalidationAll, Version: now}},
		{"long cache", strings.Repeat("c", MaxCache+1), driver.Invalidation{Kind: driver.InvalidationAll, Version: now}},
		{"zero version", "c", driver.Invalidation{Kind: driver.InvalidationAll}},
		{"before 1970", "c", driver.Invalidation{Kind: driver.InvalidationAll, Version: time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC)}},
		{"no kind", "c", driver.Invalidation{Version: now}},
		{"unknown kind", "c", driver.Invalidation{Kind: 9, Version: now}},
		{"key without target", "c", driver.Invalidation{Kind: driver.InvalidationKey, Version: now}},
		{"prefix without target", "c", driver.Invalidation{Kind: driver.InvalidationPrefix, Version: now}},
		{"all with target", "c", driver.Invalidation{Kind: driver.InvalidationAll, Target: "secret-key", Version: now}},
		{"long target", "c", driver.Invalidation{Kind: driver.InvalidationKey, Target: strings.Repeat("k", MaxTarget+1), Version: now}},
	} {
		_, err := Append(nil, 1, c.cache, c.inv)
		if err == nil {
			t.Errorf("%s: encoded", c.name)
			continue
		}
		if strings.Contains(err.Error(), "secret-key") {
			t.Errorf("%s: error %q quotes the target", c.name, err)
		}
	}
}

// The decoder takes exactly the encoder's output: every other message is
// an error.
func TestBusMessageDecoderIsStrict(t *testing.T) {
	const good = "fc1 fedcba9876543210 k 1764524459123456 7:productproduct:42"
	if _, err := Decode(good); err != nil {
		t.Fatalf("the reference message: %v", err)
	}
	for _, bad := range []string{
		"",
		"fc1",
		"fc2 fedcba9876543210 k 1764524459123456 7:productproduct:42",  // unknown version
		"FC1 fedcba9876543210 k 1764524459123456 7:productproduct:42",  // version case
		"fc1 FEDCBA9876543210 k 1764524459123456 7:productproduct:42",  // hex case
		"fc1 fedcba987654321 k 1764524459123456 7:productproduct:42",   // short origin
		"fc1 fedcba98765432100 k 1764524459123456 7:productproduct:42", // long origin
		"fc1 fedcba987654321g k 1764524459123456 7:productproduct:42",  // not hex
		"fc1 fedcba9876543210 x 1764524459123456 7:productproduct:42",  // unknown kind
		"fc1 fedcba9876543210 kk 1764524459123456 7:productproduct:42",
		"fc1 fedcba9876543210 k  1764524459123456 7:productproduct:42",
		"fc1 fedcba9876543210 k 01764524459123456 7:productproduct:42", // leading zero
		"fc1 fedcba9876543210 k -1764524459123456 7:productproduct:42", // sign
		"fc1 fedcba9876543210 k +1764524459123456 7:productproduct:42",
		"fc1 fedcba9876543210 k 9223372036854775808 7:productproduct:42", // above int64
		"fc1 fedcba9876543210 k 99999999999999999999 7:productproduct:42",
		"fc1 fedcba9876543210 k 1764524459123456 07:productproduct:42",
		"fc1 fedcba9876543210 k 1764524459123456 0:product:42", // empty cache
		"fc1 fedcba9876543210 k 1764524459123456 256:" + strings.Repeat("c", 256) + "k",
		"fc1 fedcba9876543210 k 1764524459123456 1000:product",       // cache past the end
		"fc1 fedcba9876543210 k 1764524459123456 7:product",          // key without target
		"fc1 fedcba9876543210 p 1764524459123456 7:product",          // prefix without target
		"fc1 fedcba9876543210 a 1764524459123456 7:productx",         // all with target
		"fc1 fedcba9876543210 k 1764524459123456 7productproduct:42", // no colon
		"fc1 fedcba9876543210 k 1764524459123456:7:productproduct:42",
		"fc1 fedcba9876543210 k 1764524459123456 7:p" + strings.Repeat("k", MaxTarget+7),
		"fc1 fedcba9876543210 k " + strings.Repeat("9", 1<<20),
	} {
		if _, err := Decode(bad); !errors.Is(err, ErrBadMessage) {
			t.Errorf("decoded %.80q: %v", bad, err)
		}
	}
}

// CanonicalUint never takes more than 19 digits, whatever it is asked
// for: 20 could overflow a uint64.
func TestCanonicalUintDoesNotOverflow(t *testing.T) {
	if v, ok := CanonicalUint("9999999999999999999", 19); !ok || v != 9999999999999999999 {
		t.Fatalf("19 nines = %d, %v", v, ok)
	}
	for _, s := range []string{"18446744073709551615", "18446744073709551616", "99999999999999999999"} {
		if v, ok := CanonicalUint(s, 20); ok {
			t.Errorf("CanonicalUint(%s, 20) = %d, accepted", s, v)
		}
	}
}

// FuzzDecode: the decoder never panics, and whatever it accepts is well
// formed and encodes back to the very same bytes.
func FuzzDecode(f *testing.F) {
	f.Add("fc1 fedcba9876543210 k 1764524459123456 7:productproduct:42")
	f.Add("fc1 0000000000000000 a 0 1:c")
	f.Add("fc1 0123456789abcdef p 1 3:abc{tenant}:")
	f.Add("fc1 fedcba9876543210 k 9223372036854775807 255:" + strings.Repeat("c", 255) + "k")
	f.Add("fc2 fedcba9876543210 k 1 1:cx")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		m, err := Decode(s)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error %v does not match ErrBadMessage", err)
			}
			return
		}
		if err := Check(m.Cache, m.Inv); err != nil {
			t.Fatalf("decoded %q into an invalidation that cannot be published: %v", s, err)
		}
		again, err := Append(nil, m.Origin, m.Cache, m.Inv)
		if err != nil || string(again) != s {
			t.Fatalf("decoded %q, which encodes back to %q, %v", s, again, err)
		}
	})
}
