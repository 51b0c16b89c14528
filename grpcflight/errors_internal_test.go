package grpcflight

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/singleflight"
)

// Every error the Cache may return maps to its status code. The errors
// that are hard to provoke through a server (a breaker open in cluster
// mode, the throttle) are checked here; grpcflight_test.go provokes the
// others end to end.
func TestToStatusMapsTheCacheErrors(t *testing.T) {
	handlers := status.Error(codes.NotFound, "the handler's own")
	deadline, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel()
	canceled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want codes.Code
	}{
		{"caller deadline", deadline, errors.New("anything"), codes.DeadlineExceeded},
		{"caller canceled", canceled, errors.New("anything"), codes.Canceled},
		{"breaker open", context.Background(), fmt.Errorf("claim: %w", driver.ErrBreakerOpen), codes.Unavailable},
		{"shared timeout", context.Background(), fmt.Errorf("shared tier: %w", context.DeadlineExceeded), codes.Unavailable},
		{"closed", context.Background(), flightcache.ErrClosed, codes.Unavailable},
		{"throttled", context.Background(), &flightcache.ThrottledError{Err: &handlerError{handlers}}, codes.Unavailable},
		{"too many waiters", context.Background(), singleflight.ErrTooManyWaiters, codes.ResourceExhausted},
		{"too many in flight", context.Background(), singleflight.ErrTooManyInFlight, codes.ResourceExhausted},
		{"panic", context.Background(), &singleflight.PanicError{Value: "boom"}, codes.Internal},
		{"handler", context.Background(), &handlerError{status.Error(codes.PermissionDenied, "x")}, codes.PermissionDenied},
		{"cached negative answer", context.Background(), flightcache.ErrNotFound, codes.NotFound},
	} {
		got := toStatus(c.ctx, c.err)
		if status.Code(got) != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if got := toStatus(context.Background(), &handlerError{handlers}); got != handlers {
		t.Errorf("a handler's error came back as %v, not unchanged", got)
	}
}
