// Package ratelog bounds how often a recurring warning is logged: during an
// outage or an overload the same line would otherwise be written once per
// request, drowning the log and costing the hot path a write each.
package ratelog

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// Limiter logs at most one record per interval and counts the ones it
// dropped, reporting that count (as "suppressed") on the next record it
// lets through. The zero value is not usable; use New. A Limiter is safe
// for concurrent use.
type Limiter struct {
	log   *slog.Logger
	every time.Duration
	// next is the earliest UnixNano at which a record may be logged; a
	// caller that moves it forward with CompareAndSwap owns the record.
	next atomic.Int64
	// suppressed counts the records dropped since the last one logged.
	suppressed atomic.Int64
}

// New returns a Limiter that writes to log at most once per every.
func New(log *slog.Logger, every time.Duration) *Limiter {
	return &Limiter{log: log, every: every}
}

// Log writes the record unless one was written less than the interval ago;
// then it only counts it.
func (l *Limiter) Log(ctx context.Context, level slog.Level, msg string, attrs ...slog.Attr) {
	if !l.log.Enabled(ctx, level) {
		return
	}
	now := time.Now().UnixNano()
	next := l.next.Load()
	if now < next || !l.next.CompareAndSwap(next, now+int64(l.every)) {
		l.suppressed.Add(1)
		return
	}
	if n := l.suppressed.Swap(0); n > 0 {
		attrs = append(attrs, slog.Int64("suppressed", n))
	}
	l.log.LogAttrs(ctx, level, msg, attrs...)
}
