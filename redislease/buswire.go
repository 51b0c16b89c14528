package redislease

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
	busVersion = "fc1 "
	// maxBusCache bounds a cache name on the bus, in bytes.
	maxBusCache = 255
	// maxBusTarget bounds a key or prefix on the bus, in bytes: far above
	// any store's key limit, low enough to bound what a subscriber reads.
	maxBusTarget = 64 << 10
	// maxBusHeader bounds everything but the cache name and the target:
	// version, origin, kind, a 19-digit version, a 3-digit length and the
	// separators.
	maxBusHeader = len(busVersion) + 16 + 1 + 1 + 1 + 19 + 1 + 3 + 1
	// maxBusMessage bounds a whole message.
	maxBusMessage = maxBusHeader + maxBusCache + maxBusTarget
)

// errBadMessage is matched by every decoding error.
var errBadMessage = errors.New("redislease: malformed bus message")

// busMessage is a decoded bus message.
type busMessage struct {
	origin uint64
	cache  string
	inv    driver.Invalidation
}

var busKinds = [...]byte{
	driver.InvalidationKey:    'k',
	driver.InvalidationPrefix: 'p',
	driver.InvalidationAll:    'a',
	// Tags: t invalidated, e expired.
	driver.InvalidationTag:       't',
	driver.InvalidationTagExpire: 'e',
}

// checkInvalidation reports what is wrong with publishing inv for cache,
// without quoting either.
func checkInvalidation(cache string, inv driver.Invalidation) error {
	switch {
	case cache == "":
		return errors.New("redislease: bus: empty cache name")
	case len(cache) > maxBusCache:
		return errors.New("redislease: bus: cache name longer than " + strconv.Itoa(maxBusCache) + " bytes")
	case inv.Version.IsZero() || inv.Version.UnixMicro() < 0:
		return errors.New("redislease: bus: Version must be a wall-clock time after 1970")
	}
	switch inv.Kind {
	case driver.InvalidationKey, driver.InvalidationPrefix, driver.InvalidationTag, driver.InvalidationTagExpire:
		if inv.Target == "" {
			return errors.New("redislease: bus: empty Target for a " + inv.Kind.String() + " invalidation")
		}
		if len(inv.Target) > maxBusTarget {
			return errors.New("redislease: bus: Target longer than " + strconv.Itoa(maxBusTarget) + " bytes")
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

// appendBusMessage appends the encoding of inv, published by origin for
// cache, to dst.
func appendBusMessage(dst []byte, origin uint64, cache string, inv driver.Invalidation) ([]byte, error) {
	if err := checkInvalidation(cache, inv); err != nil {
		return dst, err
	}
	dst = append(dst, busVersion...)
	dst = appendHex16(dst, origin)
	dst = append(dst, ' ', busKinds[inv.Kind], ' ')
	dst = strconv.AppendInt(dst, inv.Version.UnixMicro(), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(len(cache)), 10)
	dst = append(dst, ':')
	dst = append(dst, cache...)
	return append(dst, inv.Target...), nil
}

const hexDigits = "0123456789abcdef"

func appendHex16(dst []byte, v uint64) []byte {
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, hexDigits[(v>>uint(shift))&0xf])
	}
	return dst
}

// decodeBusMessage decodes one message, rejecting anything that is not
// exactly what appendBusMessage writes. The strings it returns share the
// message's memory.
func decodeBusMessage(s string) (busMessage, error) {
	var m busMessage
	if len(s) > maxBusMessage {
		return m, errBadMessage
	}
	rest, ok := strings.CutPrefix(s, busVersion)
	if !ok || len(rest) < 17 || rest[16] != ' ' {
		return m, errBadMessage
	}
	for i := range 16 {
		d := strings.IndexByte(hexDigits, rest[i])
		if d < 0 {
			return m, errBadMessage
		}
		m.origin = m.origin<<4 | uint64(d)
	}
	rest = rest[17:]
	if len(rest) < 2 || rest[1] != ' ' {
		return m, errBadMessage
	}
	switch rest[0] {
	case 'k':
		m.inv.Kind = driver.InvalidationKey
	case 'p':
		m.inv.Kind = driver.InvalidationPrefix
	case 'a':
		m.inv.Kind = driver.InvalidationAll
	case 't':
		m.inv.Kind = driver.InvalidationTag
	case 'e':
		m.inv.Kind = driver.InvalidationTagExpire
	default:
		return m, errBadMessage
	}
	rest = rest[2:]
	i := strings.IndexByte(rest, ' ')
	if i < 0 {
		return m, errBadMessage
	}
	micros, ok := canonicalUint(rest[:i], 19)
	if !ok || micros > 1<<63-1 {
		return m, errBadMessage
	}
	m.inv.Version = time.UnixMicro(int64(micros))
	rest = rest[i+1:]
	i = strings.IndexByte(rest, ':')
	if i < 0 {
		return m, errBadMessage
	}
	n, ok := canonicalUint(rest[:i], 3)
	if !ok || n == 0 || n > maxBusCache || uint64(len(rest)-i-1) < n {
		return m, errBadMessage
	}
	rest = rest[i+1:]
	m.cache, m.inv.Target = rest[:n], rest[n:]
	switch {
	case m.inv.Kind == driver.InvalidationAll && m.inv.Target != "",
		m.inv.Kind != driver.InvalidationAll && m.inv.Target == "",
		len(m.inv.Target) > maxBusTarget:
		return m, errBadMessage
	}
	return m, nil
}

// maxUintDigits is the most digits canonicalUint reads: every 19-digit
// decimal fits in a uint64, some 20-digit ones do not.
const maxUintDigits = 19

// canonicalUint parses a decimal of at most maxDigits digits (never more
// than maxUintDigits, so it cannot overflow), without sign or leading
// zeros.
func canonicalUint(s string, maxDigits int) (uint64, bool) {
	if s == "" || len(s) > min(maxDigits, maxUintDigits) || (len(s) > 1 && s[0] == '0') {
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
