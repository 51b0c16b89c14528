package leakcheck

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if os.Getenv("LEAKCHECK_LEAK") == "1" {
		timeout = 100 * time.Millisecond // the leak is certain: no need to wait for it
	}
	VerifyTestMain(m)
}

// parkedUntilClosed is a goroutine's function the tests look for in a
// report. Once running it closes started: from then until stop is closed,
// the goroutine's stack names it. Before the goroutine first runs, its
// stack shows only the go statement's wrapper, and a busy host can keep it
// from running for longer than a test's timeout.
func parkedUntilClosed(started chan<- struct{}, stop <-chan struct{}) {
	close(started)
	<-stop
}

// parked starts a goroutine in parkedUntilClosed and returns once it runs
// there; closing the returned channel ends it.
func parked() chan<- struct{} {
	started, stop := make(chan struct{}), make(chan struct{})
	go parkedUntilClosed(started, stop)
	<-started
	return stop
}

func TestFindReportsARunningGoroutineAndClearsOnceItEnds(t *testing.T) {
	stop := parked()
	err := find(50 * time.Millisecond)
	close(stop) // before any Fatal, so that no later test sees the goroutine
	if err == nil || !strings.Contains(err.Error(), "leakcheck.parkedUntilClosed") {
		t.Fatalf("find with a parked goroutine = %v, want its stack", err)
	}
	// find waits up to Timeout for the goroutine, released now, to end.
	if err := find(Timeout); err != nil {
		t.Fatalf("find after the goroutine ended: %v", err)
	}
}

// A goroutine that ends within the timeout is not a leak: Find waits for it.
func TestFindWaitsForAGoroutineThatIsEnding(t *testing.T) {
	stop := parked()
	time.AfterFunc(20*time.Millisecond, func() { close(stop) })
	if err := find(Timeout); err != nil {
		t.Fatalf("find: %v", err)
	}
}

func TestFuncName(t *testing.T) {
	for line, want := range map[string]string{
		"os/signal.signal_recv()":                    "os/signal.signal_recv",
		"testing.(*T).Run(0xc000003340, {0x5, 0x6})": "testing.(*T).Run",
		"main.main.func1()":                          "main.main.func1",
		"created by main.main in goroutine 1":        "created by main.main in goroutine 1",
	} {
		if got := funcName(line); got != want {
			t.Errorf("funcName(%q) = %q, want %q", line, got, want)
		}
	}
}

// TestLeakingHelper leaks a goroutine when run by
// TestVerifyTestMainFailsALeakingRun, and does nothing otherwise.
func TestLeakingHelper(t *testing.T) {
	if os.Getenv("LEAKCHECK_LEAK") != "1" {
		t.Skip("run by TestVerifyTestMainFailsALeakingRun")
	}
	parked()
}

// A test binary whose passing tests leave a goroutine behind exits 1 and
// prints the goroutine's stack; the same binary without the leak passes.
func TestVerifyTestMainFailsALeakingRun(t *testing.T) {
	run := func(leak string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLeakingHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), "LEAKCHECK_LEAK="+leak)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("1")
	if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 1 {
		t.Fatalf("leaking run: %v, want exit status 1\n%s", err, out)
	}
	if !strings.Contains(out, "leakcheck: errors on a successful test run") || !strings.Contains(out, "leakcheck.parkedUntilClosed") {
		t.Fatalf("leaking run's output lacks the report or the stack:\n%s", out)
	}
	if out, err := run("0"); err != nil {
		t.Fatalf("run without the leak: %v\n%s", err, out)
	}
}
