// Package grafana ships the Grafana dashboard for flightcache's Prometheus
// metrics (package promflight): requests per origin call, origin
// suppression ratio, requests, flights, origin calls, throttled answers and
// remote waits side by side, in-flight keys, waiter and origin call
// latency, hit ratio per tier, rejections, stale served, origin calls by
// result, flight failures, the Get failure ratio (callers that left are
// no failures), the shared tier's circuit breaker, filtered Gets,
// cluster coalescing and cross-instance invalidation (invalidations sent,
// received, applied and ignored, the Bus's state and disconnects, and the
// time since the last invalidation received). Import flightcache.json in Grafana, or serve
// Dashboard from a program. Its test checks that every query names a metric
// promflight registers, so the two cannot drift apart.
package grafana

import _ "embed"

// Dashboard is flightcache.json, the dashboard's JSON model. It assumes
// promflight's metric names without a namespace and a Prometheus data
// source chosen through the dashboard's "datasource" variable.
//
//go:embed flightcache.json
var Dashboard []byte
