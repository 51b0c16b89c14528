# flightcache: the README's commands. `make test` is what CI runs.
#
# The repository is a workspace of modules (go.work; docs/ARCHITECTURE.md,
# "Layout"): the go command reads go.work from any directory of the
# checkout, and the pattern below names the packages of every module, so
# one invocation builds, vets or tests them all together.
GO        ?= go
PKGS      ?= github.com/flightcache/flightcache/...
MODULES    = $(shell $(GO) list -m -f '{{.Dir}}')
# The released library modules besides the core, whose suites also run outside the workspace (modules).
LIBMODULES = memstore redisstore redislease bloomguard breaker promflight otelflight httpflight grpcflight flightcachevet
BENCH     ?= .
COUNT     ?= 10
BENCHTIME ?= 1s
BENCHOUT  ?= bench.txt
# The module and version of each package a build compiles (modules).
DEPVERSION = {{with .Module}}{{.Path}} {{.Version}}{{end}}

.PHONY: test test-compiling test-fuzzing test-waiting prebuild fmt-check vet vettool modules apicheck rules-check race chaos-short chaos-short-inproc chaos-short-productd fuzz fuzz-short soak perf-report perf-report-quick lint bench stress demo chaos api-report release release-prepare http-conformance load-test

## test: gofmt check, go vet, the repository's own analyzer, every module built and vetted outside the workspace, the API-compatibility check against the last release point, the Prometheus rules checked and unit-tested, the race-enabled test suite of every module (with the module checks of internal/archtest and the release tool's tests), every fuzz target for 3000 executions and a one-minute chaos run (needs network for module downloads, Redis, PostgreSQL, redis-server and promtool; see README, "Tests").
## After the two quick checks, three streams run side by side from the start (make -j3, each line printed whole). test-waiting: the race suite, whose tests spend most of their time waiting on Redis, PostgreSQL, timers and child processes, and then the chaos run's productd half. test-compiling: the checks that compile plain and analyse. test-fuzzing: the fuzz targets, whose builds are instrumented and so share nothing with the other two, the API check, and then the chaos run's in-process half, beside the race suite's last tests. On 2 cores the compiling streams fill the CPU the waiting tests leave idle, and each go command's serial phases (loading, linking) leave room for the others. The compiling stream first builds productd and the chaos checker (prebuild) and then runs go vet, which compiles every other package once: the race suite's tests and the chaos run go build productd, and with a cold cache that build would count against time bounds (productd's tests build it before their deadlines start, and their race test binary, which needs every dependency compiled with -race first, is rarely ready before the plain build is done). modules, vettool and perf-report-quick follow go vet, whose plain builds they reuse (two go commands compiling the same package at once both compile it). The chaos run's productd half waits for the race suite: beside productd's end-to-end tests (processes, and a test that loads the host on purpose) its write time bounds broke. Each stream runs its targets in order; the first failure fails make test once the other streams end.
test: fmt-check rules-check
	@$(MAKE) --no-print-directory -j3 --output-sync=line test-compiling test-fuzzing test-waiting

test-compiling:
	@for t in prebuild vet modules vettool perf-report-quick; do $(MAKE) --no-print-directory $$t || exit 1; done

test-fuzzing:
	@for t in fuzz-short apicheck chaos-short-inproc; do $(MAKE) --no-print-directory $$t || exit 1; done

test-waiting:
	@for t in race chaos-short-productd; do $(MAKE) --no-print-directory $$t || exit 1; done

## prebuild: productd and the chaos checker compiled (plain, not -race) into the build cache, the first step of make test's compiling stream
prebuild:
	$(GO) build -o /dev/null ./cmd/productd ./cmd/chaos

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

## vettool: every module under the repository's own analyzer, flightcachevet/cmd/flightcachevet, every check on (-handkey included); it must report nothing
vettool:
	@d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; \
	$(GO) build -o "$$d/flightcachevet" ./flightcachevet/cmd/flightcachevet && \
	$(GO) vet -vettool="$$d/flightcachevet" -handkey $(PKGS)

## modules: each module built and vetted on its own, outside the workspace (GOWORK=off), as a user's build sees it: a requirement missing from a go.mod cannot hide behind go.work.
## The released library modules' suites then run outside the workspace too (without -race; about a minute and a half when all run), on the versions their own go.mod selects, whenever those differ from what the workspace's race run compiled (go list -deps -test of the module's packages, with and without GOWORK): with the same versions the suite would test the same code twice, and it is skipped with a note. The core requires nothing, so its build is the same either way; cmd, deploy and bench are not released, and their suites (productd's end-to-end tests take minutes) run once, in the workspace (race).
## internal/archtest adds what a build cannot see: every go.mod is tidy, the core requires nothing, and scratch modules outside the repository that import the core (or the Redis adapters) get nothing more in their module graph (go list -m all).
modules:
	@set -e; for m in $(MODULES); do \
		echo "GOWORK=off go build ./... && go vet ./...  ($$m)"; \
		(cd "$$m" && GOWORK=off $(GO) build ./... && GOWORK=off $(GO) vet ./...); \
	done
	@set -e; for m in $(LIBMODULES); do \
		off=$$(cd "$$m" && GOWORK=off $(GO) list -deps -test -f '$(DEPVERSION)' ./... | grep -v '^github.com/flightcache/' | sort -u); \
		on=$$(cd "$$m" && $(GO) list -deps -test -f '$(DEPVERSION)' ./... | grep -v '^github.com/flightcache/' | sort -u); \
		if [ "$$off" = "$$on" ]; then \
			echo "GOWORK=off go test ./...  ($$m): not run, its build compiles the same module versions as the workspace's, whose race run tests them"; \
		else \
			echo "GOWORK=off go test ./...  ($$m): its own go.mod selects other versions than the workspace:"; \
			d=$$(mktemp -d); echo "$$on" > "$$d/on"; echo "$$off" > "$$d/off"; diff "$$d/on" "$$d/off" | grep '^[<>]' || true; rm -rf "$$d"; \
			(cd "$$m" && GOWORK=off $(GO) test -count=1 -vet=off ./...); \
		fi; \
	done

## rules-check: deploy/prometheus/rules.yml checked and its unit tests (rules_test.yml) run by promtool; skipped with a note when promtool is not installed (apt-get install prometheus), except under CI=true, where it must be. The dashboard's queries are parsed by promtool in deploy/grafana's tests (TestDashboardQueriesParse), under the same rule.
rules-check:
	@if command -v promtool >/dev/null 2>&1; then \
		promtool check rules deploy/prometheus/rules.yml && promtool test rules deploy/prometheus/rules_test.yml; \
	elif [ "$$CI" = true ]; then \
		echo "rules-check: promtool not found; under CI=true it must be installed (apt-get install prometheus)"; exit 1; \
	else \
		echo "rules-check: skipped, promtool not installed (apt-get install prometheus)"; \
	fi

## race: every package's tests under -race. SLOWPKGS, the packages whose tests take longest (productd's end-to-end tests, minutes; then the root package's and internal/archtest's), are named first: go test compiles and starts the packages in the order named, so the longest run starts as early as its build allows. RACE_P test binaries run at once (go test -p, default 4 rather than go's one per core): most of these tests wait on servers, timers and child processes. -vet=off: make vet (and make test) vets every package already. -ldflags=-w: the test binaries are linked without DWARF, which only debuggers read (stack traces and race reports use the binary's own symbol table); it saves a fifth of each of some 50 links. -timeout 30m catches a hung test binary with room for a busy host: productd's end-to-end tests have taken 11 minutes with a second make test beside them on a slow 2-core machine.
SLOWPKGS ?= github.com/flightcache/flightcache/cmd/internal/productd github.com/flightcache/flightcache github.com/flightcache/flightcache/internal/archtest
RACE_P   ?= 4
race:
	$(GO) test -race -count=1 -vet=off -ldflags=-w -p $(RACE_P) -timeout 30m $(SLOWPKGS) $(PKGS)

## apicheck: every released module's API (versions.txt) against the same module at the last release point (versions.txt's api-base, taken from git archive into a temporary directory) with apidiff; an incompatible change fails unless CHANGELOG.md's [Unreleased] section declares it under "### Breaking" (see CHANGELOG.md's head). Part of make test; needs the full history (not a shallow clone)
APIDIFF ?= golang.org/x/exp/cmd/apidiff@v0.0.0-20261113113407-e3970619a1a4
apicheck:
	$(GO) run ./internal/release apicheck -apidiff $(APIDIFF)

## release-prepare: VERSION=vX.Y.Z into versions.txt for every released module and into every go.mod's requirements on its siblings; commits nothing (README, "Releases")
release-prepare:
	$(GO) run ./internal/release prepare $(VERSION)

## release: VERSION=vX.Y.Z after checks (a semantic version, a clean tree, a dated CHANGELOG.md section for it, versions.txt listing every module of go.work with VERSION for each released one, every go.mod requiring its siblings at VERSION, no such tag yet): tags HEAD vX.Y.Z (the core) and <dir>/vX.Y.Z for every other released module, records HEAD as the API release point in versions.txt (a commit of its own) and prints the git push commands; it pushes nothing. DRY_RUN=1 checks and prints the tags only. internal/release's tests run it in a copy of the repository (part of make test's race run)
release:
	$(GO) run ./internal/release tag $(if $(DRY_RUN),-n) $(VERSION)

## stress: the concurrency tests, many times under -race, to catch rare interleavings
stress:
	$(GO) test -race -count=20 -timeout 30m ./internal/flightgroup/ ./singleflight/ .

## load-test: cluster herds with productd's default flags on a host at load 10
## (GOMAXPROCS x 5 spinning processes); about 10 minutes, and it loads the
## whole host. make test pins the defaults with TestDefaultsHoldTogetherOnABusyHost.
load-test:
	$(GO) test -tags loadtest -count=1 -v -timeout 20m -run 'TestClusterHerdsHoldWithTheDefaultsAtLoadTen' ./cmd/internal/productd/

## lint: staticcheck (fetched through the module proxy)
lint: vet
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

## bench: every benchmark (the peers' side by side in module bench), summarised by benchstat
bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count=$(COUNT) -benchtime=$(BENCHTIME) $(PKGS) | tee $(BENCHOUT)
	$(GO) run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da $(BENCHOUT)

## demo: the herd and its cure, in numbers. It says so before it compiles (about 2 minutes on a cold 2-core machine, seconds once cached), and the demo then prints each phase; DEMO_ARGS are its flags (e.g. DEMO_ARGS='-n 500')
demo:
	@d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; \
	echo "demo: compiling cmd/stampede and the service it starts (about 2 minutes on a cold 2-core machine, seconds once cached)"; \
	$(GO) build -o "$$d/stampede" ./cmd/stampede && "$$d/stampede" $(DEMO_ARGS)

## chaos-short: the history checker for about a minute with a fixed seed: 18 s per in-process mode (chaos-short-inproc), then 12 s of productd processes (chaos-short-productd); exits 1 on any violation. make test runs the two halves in different streams (see test), so their time bounds get more slack for the suites running beside them: 500 ms for the in-process modes, which run beside the race suite's end-to-end tests, 250 ms for productd's, which runs after them
chaos-short:
	@$(MAKE) --no-print-directory chaos-short-inproc && $(MAKE) --no-print-directory chaos-short-productd

chaos-short-inproc:
	$(GO) run ./cmd/chaos -duration 54s -modes cluster,local,nobus -seed 1 -q -extra-slack 500ms

chaos-short-productd:
	$(GO) run ./cmd/chaos -duration 12s -modes productd -seed 1 -q -extra-slack 250ms

## chaos: K instances (in-process caches, then productd processes) on a private redis-server under faults, the recorded history checked against the promises (about 2 minutes; needs redis-server, PostgreSQL or a SQLite fallback, the go command)
CHAOS_DURATION ?= 2m
chaos:
	$(GO) run ./cmd/chaos -duration $(CHAOS_DURATION)

## api-report: the size of the root package's API and of the read path (docs/ARCHITECTURE.md, "The API, on one screen")
api-report:
	$(GO) test -count=1 -run TestAPIFitsOnOneScreen -v ./internal/archtest/ | grep 'root package:'
	@d=$$(mktemp -d); bin=$$d/coldget; \
	$(GO) build -cover -covermode=atomic -coverpkg=github.com/flightcache/flightcache/... -o $$bin ./bench/coldget && \
	mkdir $$d/counters && COLDGET_COUNTERS=$$d/counters $$bin 2>/dev/null && \
	$(GO) tool covdata func -i=$$d/counters | awk '$$NF != "0.0%" && $$1 != "total"' | grep -v coldget/main.go > $$d/funcs; \
	cat $$d/funcs; echo "a cold Get enters $$(wc -l < $$d/funcs) functions of the repository's packages (goal: at most 30)"; rm -rf $$d

## fuzz: every fuzz target of the repository (found by git grep, so a new one is included) for FUZZTIME each (default 30s, about 5 minutes for the nine; a count such as 5000x also works); the inputs that found new coverage are kept in Go's cache; FUZZ_SAVE=1 also copies up to FUZZ_KEEP (16) of them per target into the target's testdata/fuzz, the committed corpus that every go test runs.
## A failing input is written to testdata/fuzz/<target> by go test and fails the run. A run that fails with a bare "context deadline exceeded" and writes no input is Go 1.26's fuzzing coordinator racing its own -fuzztime deadline (golang/go#75804, fixed in Go 1.27), not a finding: it is reported and the next target runs. Count-based FUZZTIME (Nx) has no deadline to race.
FUZZTIME  ?= 30s
FUZZ_KEEP ?= 16
fuzz:
	@set -e; cache=$$($(GO) env GOCACHE)/fuzz; \
	git grep -n '^func Fuzz' -- '*_test.go' | sed -E 's|^(.*)/[^/]*_test\.go:[0-9]+:func (Fuzz[A-Za-z0-9_]*).*|\1 \2|' | \
	while read -r dir name; do \
		echo "fuzz $$name (./$$dir) for $(FUZZTIME)"; \
		corpus="$$dir/testdata/fuzz/$$name"; before=$$(ls "$$corpus" 2>/dev/null | wc -l); \
		if out=$$($(GO) test -vet=off -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -parallel 2 "./$$dir" 2>&1); then \
			echo "$$out" | grep -v '^fuzz: elapsed' | tail -n 3; \
		elif [ "$$(ls "$$corpus" 2>/dev/null | wc -l)" = "$$before" ] && echo "$$out" | grep -qx '    context deadline exceeded'; then \
			echo "  $$name: stopped by Go's fuzztime deadline race (golang/go#75804), no failing input written; not a finding"; \
		else \
			echo "$$out"; exit 1; \
		fi; \
		if [ "$(FUZZ_SAVE)" = 1 ]; then \
			imp=$$(cd "$$dir" && $(GO) list .); seen="$$cache/$$imp/$$name"; \
			mkdir -p "$$corpus"; \
			[ -d "$$seen" ] && ls -S -r "$$seen" | head -n $(FUZZ_KEEP) | while read -r f; do cp "$$seen/$$f" "$$corpus/$$f"; done; \
			echo "  kept $$(ls "$$corpus" | wc -l) inputs in $$corpus"; \
		fi; \
	done

## fuzz-short: make fuzz for 3000 executions per target (count-based: no deadline to race on a busy machine), part of make test: the targets build and run, and the committed corpora pass
fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=3000x FUZZ_SAVE=0

## soak: four productd processes in cluster mode under a steady Zipf load with PUTs for SOAK_DURATION (default 2m, about 2.5 minutes with the build and the seeding of 100,000 products); checks flat heap, goroutines and descriptors, origin queries within one per hot key per TTL, the GET p99, zero errors and the history's promises; exits 1 when a check failed (needs redis-server and PostgreSQL, or a SQLite fallback)
SOAK_DURATION ?= 2m
soak:
	$(GO) run ./cmd/soak -duration $(SOAK_DURATION)

## http-conformance: the HTTP caching test suite (github.com/http-tests/cache-tests) against cmd/flightproxy, with default flags and with -stale-for 1h; writes docs/http-conformance.md, the required tests passed beside the suite's published results, and every failure with its explanation (about 2 minutes; needs node, npm, curl, and git with access to github.com unless CACHE_TESTS_DIR names a checkout of the suite)
http-conformance:
	./cmd/flightproxy/conformance/run.sh

## perf-report: the scaling curves (engine cost against waiters per key and keys in flight, origin queries against instances, hit paths per tier, follower wake-up against instances and waiters beside the loopback floor, productd's and httpflight's hit requests per second beside a bare net/http handler, httpflight's upstream requests and p99 against herd size, the Batcher's loads and origin calls per second and p99 against concurrent callers beside the dataloaders and sturdyc, grpcflight's hit against a bare unary call), side by side with the peers, measured on this machine: SVG charts and tables in docs/perf (about 7 minutes on 2 cores; needs Redis)
perf-report:
	$(GO) run ./bench/perfreport -out docs/perf

## perf-report-quick: every benchmark of the report once, into a temporary directory: checks that the report runs (part of make test)
perf-report-quick:
	$(GO) run ./bench/perfreport -quick
