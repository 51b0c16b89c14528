// Package buswire is the invalidation bus's wire format: the one-line
// messages redislease's Coordinator publishes on its Redis channel and
// decodes from it. It has one encoding per invalidation, and its decoder
// accepts nothing else, so a subscriber can trust what it decodes as far
// as its shape goes.
//
// It lives apart from redislease so that its decoder can be fuzzed without
// compiling the Redis client for the fuzzer's instrumentation.
package buswire

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/flightcache/flightcache/driver"
)

// The bus's wire format, version 1. One message is one invalidation:
//
//	fc1 <origin> <kind> <version> <n>:<cache><target>
//
// origin is the publishing Coordinator's random 64-bit id in 16 lowercase
// hex digits; kind is k (key), p (prefix), a (all), t (tag invalidated)
// or e (tag expired); version is the
// Invalidation's Version in Unix microseconds, in decimal; n is the length
// of the cache name in bytes, in decimal, and target (the raw key or
// prefix or tag, empty for a) runs to the end of the message. Numbers have no
// sign and no leading zeros, so a message has exactly one encoding.
const (
	wireVersion = "fc1 "
	// MaxCache bounds a cache name on the bus, in bytes.
	MaxCache = 255
	// MaxTarget bounds a key or prefix on the bus, in bytes: far above
	// any store's key limit, low enough to bound what a subscriber reads.
	MaxTarget = 64 << 10
	// MaxHeader bounds everything but the cache name and the target:
	// version, origin, kind, a 19-digit version, a 3-digit length and the
	// separators.
	MaxHeader = len(wireVersion) + 16 + 1 + 1 + 1 + 19 + 1 + 3 + 1
	// MaxMessage bounds a whole message.
	MaxMessage = MaxHeader + MaxCache + MaxTarget
)

// ErrBadMessage is matched by every decoding error.
var ErrBadMessage = errors.New("redislease: malformed bus message")

// Message is a decoded bus message.
type Message struct {
	Origin uint64              // the publishing Coordinator's id
	Cache  string              // the Cache's name
	Inv    driver.Invalidation // what to invalidate, as of when
}

// KindByte is the letter that stands for kind in a message, for kinds Check
// accepts.
func KindByte(kind driver.InvalidationKind) byte { return kinds[kind] }

var kinds = [...]byte{
	driver.InvalidationKey:    'k',
	driver.InvalidationPrefix: 'p',
	driver.InvalidationAll:    'a',
	// Tags: t invalidated, e expired.
	driver.InvalidationTag:       't',
	driver.InvalidationTagExpire: 'e',
}

// Check reports what is wrong with publishing inv for cache,
// without quoting either.
func Check(cache string, inv driver.Invalidation) error {
	switch {
	case cache == "":
		return errors.New("redislease: bus: empty cache name")
	case len(cache) > MaxCache:
		return errors.New("redislease: bus: cache name longer than " + strconv.Itoa(MaxCache) + " bytes")
	case inv.Version.IsZero() || inv.Version.UnixMicro() < 0:
		return errors.New("redislease: bus: Version must be a wall-clock time after 1970")
	}
	switch inv.Kind {
	case driver.InvalidationKey, driver.InvalidationPrefix, driver.InvalidationTag, driver.InvalidationTagExpire:
		if inv.Target == "" {
			return errors.New("redislease: bus: empty Target for a " + inv.Kind.String() + " invalidation")
		}
		if len(inv.Target) > MaxTarget {
			return errors.New("redislease: bus: Target longer than " + strconv.Itoa(MaxTarget) + " bytes")
		}
	case driver.InvalidationAll:
		if inv.Target != "" {
			return errors.New("redislease: bus: Target must be empty for an all invalidation")
		}
	default:
		return errors.New("redislease: bus: unknown invalidation kind " + strconv.Itoa(int(inv.Kind)))
	}
	return nil
}

// Append appends the encoding of inv, published by origin for
// cache, to dst.
func Append(dst []byte, origin uint64, cache string, inv driver.Invalidation) ([]byte, error) {
	if err := Check(cache, inv); err != nil {
		return dst, err
	}
	dst = append(dst, wireVersion...)
	dst = AppendHex16(dst, origin)
	dst = append(dst, ' ', kinds[inv.Kind], ' ')
	dst = strconv.AppendInt(dst, inv.Version.UnixMicro(), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(len(cache)), 10)
	dst = append(dst, ':')
	dst = append(dst, cache...)
	return append(dst, inv.Target...), nil
}

const hexDigits = "0123456789abcdef"

// AppendHex16 appends v to dst in 16 lowercase hex digits, as a message's
// origin is written.
func AppendHex16(dst []byte, v uint64) []byte {
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, hexDigits[(v>>uint(shift))&0xf])
	}
	return dst
}

// Decode decodes one message, rejecting anything that is not
// exactly what Append writes. The strings it returns share the
// message's memory.
func Decode(s string) (Message, error) {
	var m Message
	if len(s) > MaxMessage {
		return m, ErrBadMessage
	}
	rest, ok := strings.CutPrefix(s, wireVersion)
	if !ok || len(rest) < 17 || rest[16] != ' ' {
		return m, ErrBadMessage
	}
	for i := range 16 {
		d := strings.IndexByte(hexDigits, rest[i])
		if d < 0 {
			return m, ErrBadMessage
		}
		m.Origin = m.Origin<<4 | uint64(d)
	}
	rest = rest[17:]
	if len(rest) < 2 || rest[1] != ' ' {
		return m, ErrBadMessage
	}
	switch rest[0] {
	case 'k':
		m.Inv.Kind = driver.InvalidationKey
	case 'p':
		m.Inv.Kind = driver.InvalidationPrefix
	case 'a':
		m.Inv.Kind = driver.InvalidationAll
	case 't':
		m.Inv.Kind = driver.InvalidationTag
	case 'e':
		m.Inv.Kind = driver.InvalidationTagExpire
	default:
		return m, ErrBadMessage
	}
	rest = rest[2:]
	i := strings.IndexByte(rest, ' ')
	if i < 0 {
		return m, ErrBadMessage
	}
	micros, ok := CanonicalUint(rest[:i], 19)
	if !ok || micros > 1<<63-1 {
		return m, ErrBadMessage
	}
	m.Inv.Version = time.UnixMicro(int64(micros))
	rest = rest[i+1:]
	i = strings.IndexByte(rest, ':')
	if i < 0 {
		return m, ErrBadMessage
	}
	n, ok := CanonicalUint(rest[:i], 3)
	if !ok || n == 0 || n > MaxCache || uint64(len(rest)-i-1) < n {
		return m, ErrBadMessage
	}
	rest = rest[i+1:]
	m.Cache, m.Inv.Target = rest[:n], rest[n:]
	switch {
	case m.Inv.Kind == driver.InvalidationAll && m.Inv.Target != "",
		m.Inv.Kind != driver.InvalidationAll && m.Inv.Target == "",
		len(m.Inv.Target) > MaxTarget:
		return m, ErrBadMessage
	}
	return m, nil
}

// MaxUintDigits is the most digits CanonicalUint reads: every 19-digit
// decimal fits in a uint64, some 20-digit ones do not.
const MaxUintDigits = 19

// CanonicalUint parses a decimal of at most maxDigits digits (never more
// than MaxUintDigits, so it cannot overflow), without sign or leading
// zeros.
func CanonicalUint(s string, maxDigits int) (uint64, bool) {
	if s == "" || len(s) > min(maxDigits, MaxUintDigits) || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0') // at most 19 digits: below 10^19 < 2^64
	}
	return v, true
}
