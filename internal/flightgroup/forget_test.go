package flightgroup_test

import (
	"context"
	"strings"
	"testing"

	"github.com/flightcache/flightcache/internal/flightgroup"
)

// TestForgetFuncForgetsOnlyTheMatchingKeys: a caller after ForgetFunc
// starts a new execution for a matching key, the other keys stay
// registered, and the forgotten executions still answer their own callers.
func TestForgetFuncForgetsOnlyTheMatchingKeys(t *testing.T) {
	g := flightgroup.New[string, int]()
	defer g.Close()
	release := make(chan struct{})
	started := make(chan string, 3)
	results := make(chan int, 3)
	for _, k := range []string{"a|1", "a|2", "b|1"} {
		go func() {
			v, _, _ := g.Do(context.Background(), k, func(context.Context) (int, error) {
				started <- k
				<-release
				return 1, nil
			})
			results <- v
		}()
	}
	for range 3 {
		<-started
	}
	g.ForgetFunc(func(k string) bool { return strings.HasPrefix(k, "a|") })
	if got := g.InFlight(); got != 1 {
		t.Fatalf("InFlight after forgetting two of three keys: %d, want 1", got)
	}
	v, shared, err := g.Do(context.Background(), "a|1", func(context.Context) (int, error) { return 2, nil })
	if err != nil || v != 2 || shared {
		t.Fatalf("a forgotten key joined its old execution: %d %v %v", v, shared, err)
	}
	close(release)
	for range 3 {
		if v := <-results; v != 1 {
			t.Fatalf("a forgotten execution answered its caller with %d, want 1", v)
		}
	}
}
