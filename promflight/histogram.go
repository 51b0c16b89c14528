package promflight

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// durationHistogram is a Prometheus histogram of durations, cheaper on the
// hot path than prometheus.Histogram: an observation is one atomic addition
// to its bucket and one to the integer nanosecond sum, where client_golang's
// takes four atomics including a float compare-and-swap loop. Two of these
// sit on every Do, which is what keeps the adapter within its budget.
//
// The count is derived at collection as the sum of the buckets, so buckets
// and count are always consistent with each other; the sum may include an
// observation or two that the buckets, read a moment earlier, do not —
// harmless for rates and averages.
type durationHistogram struct {
	desc     *prometheus.Desc
	bounds   []float64       // upper bounds in seconds, strictly increasing
	boundsNs []time.Duration // the same bounds, compared on the hot path
	children []*durationCounts
	labels   [][]string // label values of children[i]; nil entries without a label
}

// durationCounts is one series. counts[len(bounds)] is the +Inf bucket.
// Every field is only ever updated atomically.
type durationCounts struct {
	boundsNs []time.Duration // shared, read-only
	counts   []atomic.Uint64
	sumNs    atomic.Int64
}

// newDurationHistogram builds a histogram with one child per value of label
// (or a single child when label is empty).
func newDurationHistogram(fqName, help string, constLabels prometheus.Labels, bounds []float64, label string, values []string) *durationHistogram {
	h := &durationHistogram{bounds: bounds}
	var variable []string
	if label != "" {
		variable = []string{label}
	}
	h.desc = prometheus.NewDesc(fqName, help, variable, constLabels)
	h.boundsNs = make([]time.Duration, len(bounds))
	for i, b := range bounds {
		h.boundsNs[i] = time.Duration(math.Round(b * float64(time.Second)))
	}
	if label == "" {
		values = []string{""}
	}
	for _, v := range values {
		h.children = append(h.children, &durationCounts{boundsNs: h.boundsNs, counts: make([]atomic.Uint64, len(bounds)+1)})
		if label != "" {
			h.labels = append(h.labels, []string{v})
		} else {
			h.labels = append(h.labels, nil)
		}
	}
	return h
}

// validateBuckets reports bounds prometheus would refuse (by panicking).
func validateBuckets(bounds []float64) error {
	if len(bounds) == 0 {
		return fmt.Errorf("promflight: no histogram buckets")
	}
	for i, b := range bounds {
		if math.IsNaN(b) || math.IsInf(b, 0) || b < 0 {
			return fmt.Errorf("promflight: histogram bucket %v: want a finite, non-negative number of seconds", b)
		}
		if i > 0 && b <= bounds[i-1] {
			return fmt.Errorf("promflight: histogram buckets must be strictly increasing, got %v after %v", b, bounds[i-1])
		}
	}
	return nil
}

// observe records d. Buckets are few (16 by default) and short durations
// dominate, so a linear scan from the smallest bound ends early.
func (c *durationCounts) observe(d time.Duration) {
	i := 0
	for i < len(c.boundsNs) && d > c.boundsNs[i] {
		i++
	}
	c.counts[i].Add(1)
	c.sumNs.Add(int64(d))
}

// Describe implements prometheus.Collector.
func (h *durationHistogram) Describe(ch chan<- *prometheus.Desc) { ch <- h.desc }

// Collect implements prometheus.Collector.
func (h *durationHistogram) Collect(ch chan<- prometheus.Metric) {
	for i, c := range h.children {
		buckets := make(map[float64]uint64, len(h.bounds))
		var cumulative uint64
		for j, b := range h.bounds {
			cumulative += c.counts[j].Load()
			buckets[b] = cumulative
		}
		cumulative += c.counts[len(h.bounds)].Load()
		sum := float64(c.sumNs.Load()) / float64(time.Second)
		m, err := prometheus.NewConstHistogram(h.desc, cumulative, sum, buckets, h.labels[i]...)
		if err != nil {
			m = prometheus.NewInvalidMetric(h.desc, err)
		}
		ch <- m
	}
}
