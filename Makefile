# Every target is a thin wrapper around a plain go command, so the README's
# commands and CI's are the same.

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/seckill-lab/shop/internal/app.Version=$(VERSION)

.PHONY: run build test lint bench loadtest loadtest-ci k6-check k6-smoke

## run: start the shop with its demo defaults (embedded SQLite + in-process Redis)
run:
	$(GO) run ./cmd/shop

## build: build bin/shop
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/shop ./cmd/shop

## test: every test, with the race detector; needs MariaDB/MySQL and Redis on localhost
test:
	$(GO) test -race -count=1 -timeout 20m ./...

## lint: go vet, and gofmt must have nothing to say
lint:
	$(GO) vet ./...
	@out="$$(find . -name '*.go' -not -path './.git/*' -not -path '*/node_modules/*' -print0 | xargs -0 -r gofmt -l 2>&1)"; \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

## bench: the lock library's benchmarks
bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./internal/lockx/...

## loadtest: the Go harness, flash-sale race scenario
loadtest:
	$(GO) run ./loadtest -scenario race

## loadtest-ci: small race, retry and compare against local MariaDB + Redis, 3 instances; then the race again with order coalescing off
loadtest-ci:
	$(GO) run ./loadtest --scenario race,retry,compare --users 300 --stock 30 --retries 3 --concurrency 64 \
		--mysql-dsn 'root@tcp(127.0.0.1:3306)/' --redis-url redis://127.0.0.1:6379/0 --report /tmp/shop-loadtest-report
	$(GO) run ./loadtest --scenario race --users 300 --stock 30 --concurrency 64 --batch-max 1 \
		--mysql-dsn 'root@tcp(127.0.0.1:3306)/' --redis-url redis://127.0.0.1:6379/0 --report /tmp/shop-loadtest-report-nobatch

## k6-check: type-check the k6 scripts with tsc and @types/k6, then the k6 runner's conformance table (node --test; no k6 binary needed)
k6-check:
	cd loadtest/k6 && npm ci --no-audit --no-fund && npx tsc -p . && node --test shim/*.test.mjs

## k6-smoke: seckill-race must fail against a naive-strategy shop and pass against the safe one; the spike and the other scripts pass (MySQL, the Node k6 runner)
k6-smoke:
	bash loadtest/k6/smoke.sh
