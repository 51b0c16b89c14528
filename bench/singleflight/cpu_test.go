package singleflight_test

import (
	"syscall"
	"testing"
	"time"
)

// reportCPU starts counting the CPU time the process spends (user and
// system, from getrusage) and returns the function that reports it per
// operation as cpu-ns/op and, with callers > 1, per caller as
// cpu-ns/caller. On a machine that other processes keep busy, wall time
// measures the wait for a core as much as the work; CPU time measures the
// work (the test binary's other goroutines included, which the
// benchmarks keep idle).
func reportCPU(b *testing.B, callers int) func() {
	start := cpuTime(b)
	return func() {
		per := float64((cpuTime(b) - start).Nanoseconds()) / float64(b.N)
		b.ReportMetric(per, "cpu-ns/op")
		if callers > 1 {
			b.ReportMetric(per/float64(callers), "cpu-ns/caller")
		}
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
