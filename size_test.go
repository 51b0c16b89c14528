package flightcache

import (
	"testing"
	"unsafe"
)

// Every caller of a stampede allocates a miss, and the engine carries a
// flight per load: keep the miss in the 64-byte size class (a field more
// costs each of 10,000 waiting callers 32 bytes, which BenchmarkStampede's
// B/op shows).
func TestMissFitsOneSixtyFourByteSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(miss[*int]{}); n > 64 {
		t.Fatalf("miss is %d bytes, want at most 64", n)
	}
}
