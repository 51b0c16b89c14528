package productd

import (
	"context"
	"errors"
	"testing"
	"time"
)

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "read tcp 127.0.0.1:1->127.0.0.1:6379: i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// A startup check rides out a dependency that times out for a moment (a
// busy host), and reports any other error, or a timeout that lasts the
// whole window, without waiting for more.
func TestStartupCheckRetriesTimeoutsOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	calls := 0
	err := untilAnswer(ctx, func(context.Context) error {
		if calls++; calls < 3 {
			return timeoutErr{}
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("untilAnswer = %v after %d calls, want success on the third", err, calls)
	}
	refused := errors.New("connect: connection refused")
	calls = 0
	if err := untilAnswer(ctx, func(context.Context) error { calls++; return refused }); !errors.Is(err, refused) || calls != 1 {
		t.Fatalf("untilAnswer = %v after %d calls, want the refusal at once", err, calls)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelShort()
	if err := untilAnswer(short, func(context.Context) error { return timeoutErr{} }); !errors.As(err, new(timeoutErr)) {
		t.Fatalf("untilAnswer past its window = %v, want the last timeout", err)
	}
}
