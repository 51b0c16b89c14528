// Package leakcheck fails a test binary whose tests leave goroutines
// running: the check go.uber.org/goleak's VerifyTestMain makes, on the
// standard library alone.
//
// The library's modules use it instead of goleak because Go has no
// test-only requirements: a module that tests with goleak lists it in its
// go.mod, and every module that requires it then finds goleak in its own
// module graph (go list -m all), though no build of theirs compiles it. The
// core promises a graph with no third-party module at all, and the
// adapters a graph holding only what their packages import.
//
// Use it from a package's TestMain:
//
//	func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }
package leakcheck

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// Timeout is how long Find waits for goroutines to end before it reports
// them: a goroutine told to stop may need a moment, more on a loaded
// machine, and a leak costs the wait only when there is one.
const Timeout = 5 * time.Second

// timeout is Find's wait; this package's tests shorten it.
var timeout = Timeout

// VerifyTestMain runs the tests and, if they passed, fails the binary
// (exit status 1, the stacks on stderr) when goroutines other than the
// testing package's and the runtime's are still running after Timeout.
// It does not return.
func VerifyTestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := Find(); err != nil {
			fmt.Fprintf(os.Stderr, "leakcheck: errors on a successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Find returns nil once no goroutine other than the caller's, the testing
// package's and the runtime's is running, or, if some still run after
// Timeout, an error holding their stacks.
func Find() error {
	return find(timeout)
}

// find polls with a growing pause (1 µs doubling up to 100 ms, as goleak
// does) until no unexpected goroutine runs or timeout has passed.
func find(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	pause := time.Microsecond
	for {
		leaked := unexpected()
		if len(leaked) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("found unexpected goroutines:\n\n%s", strings.Join(leaked, "\n\n"))
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// expected are the functions at the top of the stacks of goroutines that
// belong to the testing package or the runtime rather than to the code
// under test (goleak ignores the same).
var expected = []string{
	"testing.RunTests",
	"testing.(*T).Run",
	"testing.(*T).Parallel",
	"os/signal.signal_recv", // os/signal's loop, started by the first signal.Notify
	"os/signal.loop",
	"runtime.ensureSigM",
	"runtime.ReadTrace", // go test -trace
	"runtime/trace.Start.func1",
}

// unexpected returns the stacks of the running goroutines other than the
// caller's and the expected ones.
func unexpected() []string {
	self := goroutineID(stack(false))
	var leaked []string
	for _, g := range strings.Split(string(stack(true)), "\n\n") {
		g = strings.TrimSpace(g)
		if g == "" || goroutineID([]byte(g)) == self || isExpected(g) {
			continue
		}
		leaked = append(leaked, g)
	}
	return leaked
}

// isExpected reports whether the goroutine whose stack is g is the testing
// package's or the runtime's: its first line names the goroutine, its
// second the function on top of its stack.
func isExpected(g string) bool {
	lines := strings.SplitN(g, "\n", 3)
	return len(lines) >= 2 && slices.Contains(expected, funcName(lines[1]))
}

// funcName returns the function of a stack line such as
// "pkg.(*T).Method(0xc000010000, ...)" without its arguments.
func funcName(line string) string {
	if i := strings.LastIndexByte(line, '('); i > 0 && strings.HasSuffix(line, ")") {
		return line[:i]
	}
	return line
}

// goroutineID returns the N of a stack dump that starts "goroutine N [".
func goroutineID(s []byte) string {
	s, ok := bytes.CutPrefix(s, []byte("goroutine "))
	if !ok {
		return ""
	}
	id, _, _ := bytes.Cut(s, []byte(" "))
	return string(id)
}

// stack returns runtime.Stack's dump, of every goroutine when all is set,
// in a buffer large enough for it.
func stack(all bool) []byte {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, all)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}
