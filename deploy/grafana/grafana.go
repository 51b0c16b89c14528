// Package grafana ships the Grafana dashboard for flightcache's Prometheus
// metrics (package promflight): requests per loader, suppression ratio,
// in-flight keys, waiter and loader latency, hit ratio per tier, rejections,
// stale served, failures, the shared tier's circuit breaker and filtered
// Gets. Import flightcache.json in Grafana, or serve
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
