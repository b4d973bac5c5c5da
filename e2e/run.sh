#!/usr/bin/env bash
# e2e/run.sh: the demo page's end-to-end test in headless Chromium.
# Installs Debian's chromium when it is missing (playwright-core drives it;
# Playwright's own browser download is not used), installs the locked npm
# packages, builds the shop and runs the test. Exits non-zero on failure.
set -euo pipefail
cd "$(dirname "$0")"

if [ ! -x /usr/bin/chromium ]; then
	echo "e2e: /usr/bin/chromium missing: installing Debian's chromium"
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -qq
	$sudo apt-get install -y -qq chromium
fi
/usr/bin/chromium --version 2>/dev/null || true

npm ci --no-audit --no-fund

mkdir -p ../bin
(cd .. && CGO_ENABLED=0 go build -o bin/shop-e2e ./cmd/shop)

SHOP_BIN="$(cd .. && pwd)/bin/shop-e2e" node --test --test-concurrency=1 shop.test.mjs
