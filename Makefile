# Malachi heal. `make help` lists the targets.
GO ?= go
STATICCHECK_VERSION ?= v0.8.2
GOBIN ?= $(shell $(GO) env GOPATH)/bin
BENCH_OUT ?= bench/report.txt
FAULTS_OUT ?= faults-report.json
FUZZTIME ?= 30s
NEMESIS_OUT ?= nemesis-report.json
NEMESIS_SEED ?= 0
NEMESIS_DURATION ?= 12m
NEMESIS_CLIENTS ?= 2

.PHONY: help build deps test bench lint demo faults nemesis fuzz clean

help:
	@echo "build   compile every package and the binaries into bin/"
	@echo "deps    as root on Debian: install what the root-only tests use (strace, e2fsprogs, mount, util-linux, nftables, iproute2, gcc, kcat, promtool); .ci/run runs it too"
	@echo "test    go vet, then go test -race -tags invariants over every package (the CI command)"
	@echo "bench   run every benchmark with -benchmem and write $(BENCH_OUT)"
	@echo "lint    gofmt -l, go vet, staticcheck"
	@echo "demo    start a local cluster on loopback, break it, watch it heal"
	@echo "faults  the fault suite: every demo stage on 5 real brokers (report in $(FAULTS_OUT)), every TestFault* test, the store's power-loss test over 5000 seeds (STORE_CRASH_SEEDS), the network tests (e2e TestNet*: isolate a follower, the leader, a 3|2 split, one-way loss, a capped link, a cut backfill, a flapping link), then make nemesis (root for loop disks and network namespaces)"
	@echo "nemesis the randomized nemesis on 5 brokers for NEMESIS_DURATION (12m: twelve epochs of about 52 s each, over ten minutes), seed NEMESIS_SEED (0: from the clock, printed), with NEMESIS_CLIENTS Kafka producers (2; 0: none) whose every acknowledged record is read back; report in $(NEMESIS_OUT) (root for disk and network faults)"
	@echo "fuzz    every fuzz target for FUZZTIME (30s) each; plain go test runs their seed corpora"

build:
	$(GO) build ./...
	$(GO) build -o bin/ ./cmd/... ./testbed/cmd/...

deps:
	.ci/deps

# -tags invariants compiles in the expensive state-machine checks (meta/ and
# cluster/invariants.go); vet sees both builds.
test:
	$(GO) vet ./...
	$(GO) vet -tags invariants ./...
	$(GO) test -race -count=1 -tags invariants -timeout 30m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 -timeout 60m ./... | tee $(BENCH_OUT)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(GOBIN)/staticcheck ./...

# The showcase is the scaffolding's command malachi-demo
# (testbed/cmd/malachi-demo), run with the broker and the operator CLI it
# drives. The binaries are built first, saying so: a first build compiles
# raft, Pebble and Prometheus for a minute or more, silent under `go run`.
DEMO_BINS = ./cmd/malachi ./cmd/malachid ./testbed/cmd/malachi-demo
DEMO = ./bin/malachi-demo --malachid bin/malachid --malachi bin/malachi

demo:
	@echo "demo: compiling malachi, malachid and malachi-demo into bin/ (the first build takes a minute or more)..."
	@$(GO) build -o bin/ $(DEMO_BINS)
	@echo "demo: starting: $(DEMO)"
	@$(DEMO)

# The network stages are e2e's TestNet* (brokers in network namespaces of
# their own; skipped, saying why, without root, ip, nft and tc); then the
# nemesis of `make nemesis` (NEMESIS_DURATION, 12m: over ten minutes on 5
# brokers).
faults:
	$(GO) build -o bin/ $(DEMO_BINS)
	$(DEMO) --json > $(FAULTS_OUT)
	$(GO) test -race -count=1 -timeout 60m -run 'Fault' ./...
	STORE_CRASH_SEEDS=5000 $(GO) test -race -count=1 -timeout 30m -run '^TestPowerLoss' ./store/
	$(GO) test -race -count=1 -timeout 30m -v -run '^TestNet' ./e2e/
	$(MAKE) nemesis

nemesis:
	$(GO) build -o bin/ $(DEMO_BINS)
	$(DEMO) --nemesis random --seed $(NEMESIS_SEED) --duration $(NEMESIS_DURATION) --brokers 5 --rf 3 --segments 100 --segment-size 256KiB --clients $(NEMESIS_CLIENTS) --json > $(NEMESIS_OUT)

# Every func FuzzXxx in a _test.go file, one at a time, package by package.
fuzz:
	@set -e; for dir in $$(grep -l '^func Fuzz' $$(git ls-files '*_test.go') | xargs -n1 dirname | sort -u); do \
		for name in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go | cut -c6-); do \
			echo "== $$name in ./$$dir for $(FUZZTIME)"; \
			$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) ./$$dir/; \
		done; \
	done

clean:
	rm -rf bin $(BENCH_OUT) $(FAULTS_OUT) $(NEMESIS_OUT)
