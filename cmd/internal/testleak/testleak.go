// Package testleak fails a test binary whose tests leave goroutines
// running, as goleak.VerifyTestMain does, but waits longer for goroutines
// that are on their way out: on a loaded machine a client closed by a
// fault test can take more than goleak's two seconds to wind down
// (go-redis's pool retries a failed dial once a second, and sees that its
// client was closed only when it wakes). A goroutine that never ends is
// still reported.
package testleak

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Wait is how long Main keeps looking for leaked goroutines to end.
const Wait = 10 * time.Second

// Main runs the tests and, if they passed, exits with status 1 (the
// stacks on stderr) when goroutines other than the testing package's and
// the runtime's still run after Wait. It does not return. before, when
// not nil, runs after the tests and before the check (removing files the
// tests shared, say).
func Main(m *testing.M, before func()) {
	code := m.Run()
	if before != nil {
		before()
	}
	if code == 0 {
		if err := find(Wait); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// find asks goleak (which retries for about two seconds) until it finds
// nothing or wait has passed, and returns its last answer.
func find(wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := goleak.Find()
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}
