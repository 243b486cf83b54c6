# gpumeter: `make demo` runs the main job, `make test` runs every test.
# Both start a project-local ClickHouse (scripts/clickhouse.sh), installing
# Debian's clickhouse-server first when the machine has none.

GO        ?= go
BIN       := bin/gpumeter
CH        := scripts/clickhouse.sh
DEMO_DSN  ?= clickhouse://127.0.0.1:9000/gpumeter_demo
DEMO_CONFIG := internal/demo/billing/gpumeter.yaml
DEMO_OUT  ?= .data/demo
DEMO_LISTEN ?= 127.0.0.1:8080
DEMO_METRICS_LISTEN ?= 127.0.0.1:9402
# A count, not a duration: go1.26's fuzz coordinator can fail a target with a
# bare "context deadline exceeded" when a -fuzztime duration ends while a
# worker is mid-call on a loaded machine (golang/go#75804, fixed in 1.27).
FUZZTIME  ?= 20000x
export CGO_ENABLED := 1
# go-nvml's cgo wrappers call NVML functions its header marks deprecated, and
# gcc prints a warning for each one on every cold build. They are NVIDIA's,
# not ours: silence that one warning class (Go's default is -O2 -g). Exported,
# so build, test, bench, lint and every $(GO) call below get it; override with
# `make CGO_CFLAGS=...`.
CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
export CGO_CFLAGS

# Fuzz targets run briefly by `make test`: package:FuzzName[:execs], the
# count overriding FUZZTIME for a target that is slow per input.
FUZZ_TARGETS := \
	./internal/importer:FuzzRead \
	./pricing:FuzzPrice:8000x \
	./pricing:FuzzAllocate \
	./pricing:FuzzParseBook \
	./pricing:FuzzParseContract \
	./pricing:FuzzParseUsage \
	./pricing:FuzzSpreadQuantity \
	./internal/partition:FuzzSolve \
	./internal/insights:FuzzHoldings:5000x \
	./internal/insights:FuzzSeries:5000x \
	./collectors/attribution:FuzzParseCgroup \
	./collectors/attribution:FuzzParseMapping \
	./collectors/attribution:FuzzParseDomain \
	./collectors/attribution:FuzzParseHAMiDevices \
	./internal/spool:FuzzSegmentDecode \
	./internal/chargeback:FuzzAllocateChargeback \
	./internal/chargeback:FuzzParseCarbonCSV \
	./internal/sacct:FuzzParseSacct \
	./internal/sacct:FuzzParseAccounts \
	./internal/admission:FuzzReviewWithClaims:5000x

# Packages with concurrency: their tests run under the race detector (the
# race target) and only there, since unit would run the very same tests
# again without it.
RACE_PKGS := ./collectors/... ./internal/billing ./internal/quota ./internal/leader ./internal/server ./internal/spool/...

.PHONY: all build test unit race fuzz bench lint openapi-lint demo clickhouse clickhouse-stop prometheus compose zookeeper slurm slurm-stop chdb-test clean

all: build

build:
	$(GO) build -ldflags "-X main.version=$$(git describe --tags --always --dirty 2>/dev/null) -X main.commit=$$(git rev-parse HEAD 2>/dev/null)" -o $(BIN) ./cmd/gpumeter

clickhouse:
	$(CH) start

clickhouse-stop:
	$(CH) stop

test: clickhouse prometheus compose zookeeper slurm lint openapi-lint unit race fuzz chdb-test

# The OpenAPI document linted by Redocly CLI (npx, a pinned version) with
# recommended-strict: any warning fails (scripts/openapi-lint.sh).
openapi-lint:
	scripts/openapi-lint.sh

# Debian's prometheus and promtool, for the scrape test and the alert rules.
prometheus:
	scripts/prometheus.sh install

# The one-node Slurm test cluster (docs/slurm.md), installed with apt-get
# when missing. The Slurm tests start it themselves (internal/slurmtest);
# this does it up front, outside the tests' timeouts.
slurm:
	scripts/slurm.sh start

slurm-stop:
	scripts/slurm.sh stop

# Debian's zookeeper for the replicated cluster test and the leader
# election's tests (internal/election), which start their own instances
# (storetest.StartZooKeeper); installed here, outside test timeouts. A
# ZooKeeper that cannot be installed or started fails them, never skips.
zookeeper:
	scripts/zookeeper.sh install

# Debian's docker-compose, for validating docker-compose.yaml (no daemon).
compose:
	scripts/compose.sh install

# ./... takes in the slow tests under tests/ (tests/README.md: deploy files,
# Prometheus, clusters, soak, Slurm; they build and run the gpumeter binary)
# beside cmd/gpumeter's real servers and collectors: minutes per package on
# a quiet 2-core machine, so the 10-minute default leaves too little room.
unit:
	@race=$$($(GO) list $(RACE_PKGS)) && pkgs=$$($(GO) list ./... | grep -vxF "$$race") && \
		echo "go test -count=1 -timeout 20m ./... (but RACE_PKGS)" && \
		$(GO) test -count=1 -timeout 20m $$pkgs
	$(GO) test -count=1 -tags chdb -run TestCheckedStatementsAreWellFormed ./internal/store/

# Every migration and the store's statements on ClickHouse 26.x (chDB, in
# process) beside the 18.16 server, results compared, and a day of the
# sizing measurement (internal/chdbcheck; CHDB_SIZING_DAYS=30 with
# -run TestSizing for docs/operations.md's figures). The statements it runs
# (internal/store/statements_chdb.go) are built only with -tags chdb: they
# are test fixtures, not part of the binary; `unit` checks their shape.
# libchdb.so is fetched with npm into .data/chdb/ once; chdb-go loads it at
# run time from CHDB_LIB_PATH. Outside CI a failed fetch skips the check
# with a warning; in CI (CI=true) it fails.
chdb-test: clickhouse
	@lib=$$(scripts/chdb.sh fetch) || { \
		if [ "$$CI" = true ]; then echo "chdb-test: could not fetch libchdb.so"; exit 1; fi; \
		echo "chdb-test: SKIPPED, could not fetch libchdb.so (fails in CI)"; exit 0; }; \
	echo "chdb-test: $$lib"; \
	TZ=UTC CHDB_LIB_PATH=$$lib $(GO) test -count=1 -tags chdb ./internal/chdbcheck/

race:
	@if [ -n "$(strip $(RACE_PKGS))" ]; then $(GO) test -count=1 -race $(RACE_PKGS); fi

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; n=$(FUZZTIME); \
		case $$rest in *:*) n=$${rest#*:};; esac; \
		echo "fuzz $$pkg $$name ($$n)"; \
		$(GO) test $$pkg -run '^$$' -fuzz "^$$name$$" -fuzztime $$n -fuzzminimizetime 200x; \
	done

bench: clickhouse
	$(GO) test -run '^$$' -bench . -benchtime 3x ./internal/store/
	$(GO) test -run '^$$' -bench . -benchmem ./internal/importer/ ./pricing/... ./internal/partition/... ./internal/insights/ ./internal/spool/... ./collectors/... ./internal/admission/
	$(GO) test -run '^$$' -bench BenchmarkAdmissionReplicas -benchtime 5000x ./cmd/gpumeter/

# lint also fails when go.mod or go.sum is not what `go mod tidy` would write
# (a direct dependency marked // indirect, a missing go.sum line).
lint:
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run 'go mod tidy'"; exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags chdb ./internal/chdbcheck/
	@out=$$(gofmt -l $$(git ls-files '*.go' ; git ls-files --others --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The bundled data set first, then six hours of a simulated 2-host fleet
# and a vGPU host through the collector (fixed start: re-running changes
# no totals).
demo: clickhouse build
	$(BIN) --clickhouse $(DEMO_DSN) demo
	$(BIN) --clickhouse $(DEMO_DSN) collect --simulate --hosts 2 --vgpu --seed 1 \
		--start 2026-11-05T00:00:00Z --duration 6h --listen ""
	$(BIN) --clickhouse $(DEMO_DSN) usage --from 2026-11-05 --to 2026-11-06 --by tenant,department
	@echo; echo "Invoicing November 2026 ($(DEMO_CONFIG)):"
	@$(BIN) --clickhouse $(DEMO_DSN) --log-level warn rollup --scheduled > /dev/null
	$(BIN) --clickhouse $(DEMO_DSN) --config $(DEMO_CONFIG) invoice run --period 2026-11 --quiet
	$(BIN) --clickhouse $(DEMO_DSN) --config $(DEMO_CONFIG) invoice render --period 2026-11 --format pdf --out-dir $(DEMO_OUT)/invoices
	$(BIN) --clickhouse $(DEMO_DSN) --config $(DEMO_CONFIG) chargeback --period 2026-11 --format html --out $(DEMO_OUT)/chargeback-2026-11.html
	@portal=$$($(BIN) --clickhouse $(DEMO_DSN) keys create --scope tenant:acme --portal --expires 24h --note "make demo portal" 2>/dev/null) && \
	admin=$$($(BIN) --clickhouse $(DEMO_DSN) keys create --scope admin --expires 24h --note "make demo" 2>/dev/null) && \
	echo && echo "Serving the demo on http://$(DEMO_LISTEN) (Ctrl-C stops it):" && \
	echo "  portal: http://$(DEMO_LISTEN)/portal/#token=$$portal&month=2026-11" && \
	echo "  API:    curl -H 'Authorization: Bearer $$admin' 'http://$(DEMO_LISTEN)/v1/invoices?period=2026-11'" && \
	echo "          curl -H 'Authorization: Bearer $$admin' 'http://$(DEMO_LISTEN)/v1/cost?tenant=acme&month=2026-11'" && \
	echo "  metrics (operators only, its own port): curl http://$(DEMO_METRICS_LISTEN)/metrics" && \
	exec $(BIN) --clickhouse $(DEMO_DSN) --config $(DEMO_CONFIG) --log-level warn serve --plain-http --listen $(DEMO_LISTEN) --metrics-listen $(DEMO_METRICS_LISTEN) --audit-queue $(DEMO_OUT)/audit-queue

clean:
	rm -rf bin
