#!/usr/bin/env bash
# dashboard-live.sh: a real Prometheus scrapes a real productd (SQLite, no
# Redis) while requests hit it, with deploy/prometheus/rules.yml loaded;
# then every query of the Grafana dashboard (deploy/grafana/flightcache.json)
# and every recording rule is run against it, and the ones that return no
# data (or only NaN) are listed.
#
# Usage, from anywhere in the checkout: deploy/prometheus/dashboard-live.sh
# Needs the go command, prometheus (apt-get install prometheus), curl and
# jq. Takes about a minute: DASHBOARD_LIVE_SECONDS (default 40) is how long
# the traffic runs. productd runs read-only (-writes disabled): the traffic
# only reads, so it needs no write token. Exits 1 when a query is refused
# (a PromQL error); queries with no data are reported, not failures: a
# panel about the cluster, the Bus or the breaker has nothing to show on a
# single productd without Redis, and a ratio has no sample while its
# denominator is 0 (docs/OBSERVABILITY.md, "No traffic").
set -euo pipefail
cd "$(dirname "$0")/../.."

for tool in go prometheus curl jq; do
	command -v "$tool" >/dev/null || { echo "dashboard-live: $tool not found" >&2; exit 2; }
done

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

# A free loopback port, as the kernel hands out for port 0.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null || echo $((20000 + RANDOM % 20000)); }
app=$(free_port)
prom=$(free_port)

echo "dashboard-live: building productd"
go build -o "$tmp/productd" ./cmd/productd
"$tmp/productd" -addr "127.0.0.1:$app" -db "$tmp/products.db" -writes disabled -cache-ttl 2s -stale-for 1m -failure-throttle 2s >"$tmp/productd.log" 2>&1 &
pids+=($!)

cp deploy/prometheus/rules.yml "$tmp/rules.yml"
cat >"$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $tmp/rules.yml
scrape_configs:
  - job_name: productd
    static_configs:
      - targets: ['127.0.0.1:$app']
EOF
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/data" \
	--web.listen-address="127.0.0.1:$prom" --log.level=warn >"$tmp/prometheus.log" 2>&1 &
pids+=($!)

for _ in $(seq 100); do
	curl -fs "http://127.0.0.1:$app/healthz" >/dev/null 2>&1 && curl -fs "http://127.0.0.1:$prom/-/ready" >/dev/null 2>&1 && break
	sleep 0.3
done
curl -fs "http://127.0.0.1:$app/healthz" >/dev/null || { echo "productd did not start:"; cat "$tmp/productd.log"; exit 1; }
curl -fs "http://127.0.0.1:$prom/-/ready" >/dev/null || { echo "prometheus did not start:"; cat "$tmp/prometheus.log"; exit 1; }

seconds=${DASHBOARD_LIVE_SECONDS:-40}
echo "dashboard-live: ${seconds}s of traffic (hits, misses, coalesced herds, not-found ids)"
end=$((SECONDS + seconds))
base="http://127.0.0.1:$app/v1/tenants/acme/products"
while [ $SECONDS -lt $end ]; do
	{
		for i in $(seq -w 1 20); do echo "$base/p-000$i"; echo "$base/p-000$i"; done
		echo "$base/p-99999"
	} | xargs -P 41 -n 1 curl -s -o /dev/null
	sleep 0.2
done
sleep 3 # a last scrape and rule evaluation
# Every query is evaluated at this instant: on a busy host the loop below
# can take longer than the queries' 30s windows, which would then see no
# traffic at all.
at=$(date +%s)

# Every dashboard query (templating variables are Grafana's, not PromQL),
# with $__rate_interval as 30s and every operation, then every recording rule.
jq -r '[.. | objects | select(has("expr")) | .expr] | .[]' deploy/grafana/flightcache.json |
	sed -e 's/\$__rate_interval/30s/g' -e 's/\$operation/.*/g' >"$tmp/queries"
grep -E '^\s*- record:' deploy/prometheus/rules.yml | sed -E 's/^\s*- record:\s*//' >>"$tmp/queries"

total=0 empty=0 refused=0
while IFS= read -r q; do
	total=$((total + 1))
	out=$(curl -s "http://127.0.0.1:$prom/api/v1/query" --data-urlencode "query=$q" --data-urlencode "time=$at")
	status=$(jq -r .status <<<"$out")
	if [ "$status" != success ]; then
		refused=$((refused + 1))
		echo "REFUSED  $q"
		echo "         $(jq -r .error <<<"$out")"
		continue
	fi
	n=$(jq '[.data.result[] | select(.value[1] != "NaN")] | length' <<<"$out")
	if [ "$n" = 0 ]; then
		empty=$((empty + 1))
		echo "NO DATA  $q"
	fi
done <"$tmp/queries"
echo "dashboard-live: $total queries, $empty without data, $refused refused"
[ "$refused" = 0 ]
