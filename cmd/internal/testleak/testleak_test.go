package testleak

import (
	"testing"
	"time"
)

// find reports a goroutine that outlives its wait, and nothing once the
// goroutine has ended, however late within the wait.
func TestFindReportsOnlyGoroutinesThatOutliveTheWait(t *testing.T) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		<-stop
	}()
	if err := find(0); err == nil {
		t.Fatal("a goroutine blocked on a channel was not reported")
	}
	// Ends three seconds in: later than one goleak.Find waits, within
	// find's wait.
	go func() {
		time.Sleep(3 * time.Second) // a goroutine on its way out, slowly
		close(stop)
	}()
	if err := find(Wait); err != nil {
		t.Fatalf("goroutines that ended within the wait were reported: %v", err)
	}
	<-done
}
