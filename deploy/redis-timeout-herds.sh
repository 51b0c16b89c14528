#!/usr/bin/env bash
# redis-timeout-herds.sh: how productd's -redis-timeout holds on a busy host.
#
# For each timeout, HERDS cluster-mode herds (stampede -instances 4, 1000
# requests each, spread over four productd processes sharing one Redis and
# one database) run with productd's own bus defaults (-bus-down-after 0)
# and that -redis-timeout. A herd that made more than one origin query
# means a Redis call outlasted the timeout: the breaker opened or the bus
# went down with no Redis fault. Make the host busy yourself (the numbers
# in docs/productd.md were taken beside `make test` in another clone).
#
#   deploy/redis-timeout-herds.sh                 # 250ms 500ms 1s, 8 herds each
#   HERDS=16 deploy/redis-timeout-herds.sh 250ms 1s
#
# Needs redis-server on PATH (a private one is started on a free port) and
# the go command; run from the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."
timeouts=("$@")
[ ${#timeouts[@]} -gt 0 ] || timeouts=(250ms 500ms 1s)
herds=${HERDS:-8}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes --pidfile "/tmp/redis-timeout-herds-$port.pid" >/dev/null
trap 'kill "$(cat /tmp/redis-timeout-herds-$port.pid)" 2>/dev/null || true' EXIT
bin=$(mktemp -d)/stampede
go build -o "$bin" ./cmd/stampede
printf '%-12s %6s %12s %14s %s\n' timeout herds "one query" "more (queries)" "errors"
for t in "${timeouts[@]}"; do
	one=0 more="" errs=0
	for _ in $(seq "$herds"); do
		out=$("$bin" -instances 4 -redis "redis://127.0.0.1:$port/0" -mode cluster -json -report "" \
			-instance-flags "-redis-timeout $t -bus-down-after 0" 2>/dev/null || true)
		q=$(printf '%s' "$out" | python3 -c 'import json,sys
try:
    d=json.load(sys.stdin)
    rs=d if isinstance(d,list) else d.get("results",[d])
    r=[x for x in rs if "cluster" in x.get("mode","")][0]
    print(r["originQueries"], r["errors"])
except Exception:
    print("? ?")')
		read -r n e <<<"$q"
		if [ "$n" = 1 ]; then one=$((one+1)); else more="$more $n"; fi
		[ "$e" = "?" ] || errs=$((errs+e))
	done
	printf '%-12s %6s %12s %14s %s\n' "$t" "$herds" "$one" "${more:- -}" "$errs"
done
