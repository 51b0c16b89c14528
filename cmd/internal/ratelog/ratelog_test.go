package ratelog

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// A burst of warnings within one interval writes one line; the next line
// after the interval reports how many were dropped.
func TestBurstWritesOneLineAndTheNextReportsTheSuppressedCount(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	l := New(log, time.Hour)
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.Log(context.Background(), slog.LevelWarn, "overloaded")
		}()
	}
	wg.Wait()
	if n := strings.Count(buf.String(), "overloaded"); n != 1 {
		t.Fatalf("%d lines for a burst of 100 within the interval, want 1:\n%s", n, buf.String())
	}
	l.mu.Lock()
	l.next = 0 // the interval has passed
	l.mu.Unlock()
	l.Log(context.Background(), slog.LevelWarn, "overloaded")
	if !strings.Contains(buf.String(), "suppressed=99") {
		t.Fatalf("second line does not report 99 suppressed:\n%s", buf.String())
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
