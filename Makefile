# Every target is a thin wrapper around a plain go command, so the README's
# commands and CI's are the same.

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/seckill-lab/shop/internal/app.Version=$(VERSION)

.PHONY: run build test lint bench loadtest k6-check

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
	$(GO) test -run '^$$' -bench . -benchtime 2000x ./internal/lockx/...

## loadtest: the Go harness, flash-sale race scenario
loadtest:
	$(GO) run ./loadtest -scenario race

## k6-check: type-check the k6 scripts, when they exist
k6-check:
	@if [ -f loadtest/k6/package.json ]; then \
		npm --prefix loadtest/k6 ci && npx --prefix loadtest/k6 tsc -p loadtest/k6; \
	else \
		echo "k6-check: loadtest/k6/package.json not found, skipping"; \
	fi
