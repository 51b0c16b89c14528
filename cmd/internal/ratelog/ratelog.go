// Package ratelog bounds how often a recurring warning is logged: during an
// outage or an overload the same line would otherwise be written once per
// request, drowning the log and costing the hot path a write each.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Limiter logs at most one record per interval and counts the ones it
// dropped, reporting that count (as "suppressed") on the next record it
// lets through. The zero value is not usable; use New. A Limiter is safe
// for concurrent use.
type Limiter struct {
	log   *slog.Logger
	every time.Duration

	// mu guards next and suppressed together: a record dropped while
	// another is let through must be counted before or after that record's
	// count is taken, never in between (it would be reported as dropped
	// before the record that it followed).
	mu sync.Mutex
	// next is the earliest UnixNano at which a record may be logged.
	next int64
	// suppressed counts the records dropped since the last one logged.
	suppressed int64
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
	l.mu.Lock()
	if now < l.next {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	l.next = now + int64(l.every)
	n := l.suppressed
	l.suppressed = 0
	l.mu.Unlock()
	if n > 0 {
		attrs = append(attrs, slog.Int64("suppressed", n))
	}
	l.log.LogAttrs(ctx, level, msg, attrs...)
}
