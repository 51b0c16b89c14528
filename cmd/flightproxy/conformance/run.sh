#!/bin/sh
# make http-conformance: runs the HTTP caching test suite
# (https://github.com/http-tests/cache-tests, the data behind
# cache-tests.fyi) against flightproxy and writes docs/http-conformance.md:
# the required tests passed beside the suite's published results, and each
# required test flightproxy fails with its explanation (explanations.json).
#
# CACHE_TESTS_DIR: a checkout of the suite; without it, the suite is cloned
# (needs git and access to github.com) into a temporary directory. Its npm
# dependencies are installed there (npm install). Needs node >= 18 and curl.
# Two runs: flightproxy with its default flags, and with -stale-for 1h.
set -eu
root=$(cd "$(dirname "$0")/../../.." && pwd)
out=${CONFORMANCE_OUT:-$root/docs/http-conformance.md}
origin_port=${ORIGIN_PORT:-18000}
proxy_port=${PROXY_PORT:-18001}
tmp=$(mktemp -d)
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

dir=${CACHE_TESTS_DIR:-}
if [ -z "$dir" ]; then
	git clone --quiet --depth 1 https://github.com/http-tests/cache-tests "$tmp/cache-tests"
	dir=$tmp/cache-tests
fi
dir=$(cd "$dir" && pwd)
(cd "$dir" && npm install --silent --no-audit --no-fund --omit=dev >/dev/null)
(cd "$root" && go build -o "$tmp/flightproxy" ./cmd/flightproxy)

await() { # url
	i=0
	until curl -s -o /dev/null "$1"; do
		i=$((i + 1))
		if [ "$i" -gt 200 ]; then echo "http-conformance: $1 does not answer" >&2; exit 1; fi
		sleep 0.1
	done
}

(cd "$dir" && npm_config_protocol=http npm_config_port=$origin_port npm_config_pidfile=$tmp/server.pid \
	exec node test-engine/server/server.mjs >"$tmp/server.log" 2>&1) &
pids="$pids $!"
await "http://127.0.0.1:$origin_port/"

run() { # label, flags...
	label=$1
	shift
	"$tmp/flightproxy" -listen "127.0.0.1:$proxy_port" -upstream "http://127.0.0.1:$origin_port" "$@" 2>"$tmp/proxy.log" &
	proxy=$!
	await "http://127.0.0.1:$proxy_port/"
	(cd "$dir" && npm_config_base="http://127.0.0.1:$proxy_port" npm_package_config_id= \
		node --no-warnings test-engine/cli.mjs >"$tmp/$label.json")
	kill "$proxy"
	wait "$proxy" 2>/dev/null || true
}
run defaults
run stale-for -stale-for 1h

node "$root/cmd/flightproxy/conformance/summarize.mjs" "$dir" "$root/cmd/flightproxy/conformance/explanations.json" \
	"flightproxy (default flags)=$tmp/defaults.json" "flightproxy -stale-for 1h=$tmp/stale-for.json" >"$out"
echo "http-conformance: wrote $out"
grep '^| \*\*flightproxy' "$out"
