# flightcache: the README's commands. `make test` is what CI runs.
GO        ?= go
PKGS      ?= ./...
BENCH     ?= .
COUNT     ?= 10
BENCHTIME ?= 1s
BENCHOUT  ?= bench.txt

.PHONY: test fmt-check vet vettool race chaos-short lint bench stress demo chaos api-report

## test: gofmt check, go vet, the module's own analyzer, the race-enabled test suite and a one-minute chaos run (needs Redis, PostgreSQL and redis-server; see README)
test: fmt-check vet vettool race chaos-short

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

## vettool: the module under its own analyzer, cmd/flightcachevet, every check on (-handkey included); it must report nothing
vettool:
	@d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; \
	$(GO) build -o "$$d/flightcachevet" ./cmd/flightcachevet && \
	$(GO) vet -vettool="$$d/flightcachevet" -handkey $(PKGS)

race:
	$(GO) test -race -count=1 -timeout 15m $(PKGS)

## stress: the concurrency tests, many times under -race, to catch rare interleavings
stress:
	$(GO) test -race -count=20 -timeout 30m ./internal/flightgroup/ ./singleflight/ .

## lint: staticcheck (fetched through the module proxy)
lint: vet
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

## bench: every benchmark, side by side with the peers, summarised by benchstat
bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count=$(COUNT) -benchtime=$(BENCHTIME) $(PKGS) | tee $(BENCHOUT)
	$(GO) run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da $(BENCHOUT)

## demo: the herd and its cure, in numbers
demo:
	$(GO) run ./cmd/stampede

## chaos-short: the history checker for about a minute with a fixed seed: 18 s per in-process mode, 12 s of productd processes (part of make test; exits 1 on any violation)
chaos-short:
	$(GO) run ./cmd/chaos -duration 66s -modes cluster,local,nobus,productd=12s -seed 1 -q

## chaos: K instances (in-process caches, then productd processes) on a private redis-server under faults, the recorded history checked against the promises (about 2 minutes; needs redis-server, PostgreSQL or a SQLite fallback, the go command)
CHAOS_DURATION ?= 2m
chaos:
	$(GO) run ./cmd/chaos -duration $(CHAOS_DURATION)

## api-report: the size of the root package's API and of the read path (docs/ARCHITECTURE.md, "The API, on one screen")
api-report:
	$(GO) test -count=1 -run TestAPIFitsOnOneScreen -v ./internal/archtest/ | grep 'root package:'
	@d=$$(mktemp -d); bin=$$d/coldget; \
	$(GO) build -cover -covermode=atomic -coverpkg=github.com/flightcache/flightcache/... -o $$bin ./internal/archtest/coldget && \
	mkdir $$d/counters && COLDGET_COUNTERS=$$d/counters $$bin 2>/dev/null && \
	$(GO) tool covdata func -i=$$d/counters | awk '$$NF != "0.0%" && $$1 != "total"' | grep -v coldget/main.go > $$d/funcs; \
	cat $$d/funcs; echo "a cold Get enters $$(wc -l < $$d/funcs) functions of the module"; rm -rf $$d
