#!/usr/bin/env bash
# Smoke run of the four k6 scripts: a live shop (embedded SQLite and
# in-process Redis, on free ports), each script's setup() and a few
# iterations under the Node shim of the k6 modules (shim/run.mjs), with the
# scripts' own checks and thresholds, then `shop verify` on the shop's
# database. A wrong URL, header, body or expected status fails it.
#
#   loadtest/k6/smoke.sh            # builds the shop
#   SHOP_BIN=bin/shop loadtest/k6/smoke.sh
#
# Needs Go (unless SHOP_BIN is given) and Node 18 or newer; no k6, no npm.
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)
work=$(mktemp -d)
pid=
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

shop=${SHOP_BIN:-}
if [ -z "$shop" ]; then
	(cd "$root" && go build -o "$work/shop" ./cmd/shop)
	shop=$work/shop
fi
case $shop in /*) ;; *) shop=$root/$shop ;; esac

admin=k6-smoke-admin-$RANDOM$RANDOM$RANDOM
"$shop" serve --addr 127.0.0.1:0 --mysql-dsn '' --sqlite-path "$work/shop.db" --redis-url '' \
	--embedded-redis-addr 127.0.0.1:0 --admin-token "$admin" --log-format text --log-level info \
	>"$work/shop.out" 2>"$work/shop.log" &
pid=$!
addr=
for _ in $(seq 600); do
	addr=$(sed -n 's/.*msg=listening addr=\([^ ]*\).*/\1/p;T;q' "$work/shop.log") # first match, no pipe
	if [ -n "$addr" ] && curl -sf "http://$addr/readyz" >/dev/null; then break; fi
	if ! kill -0 "$pid" 2>/dev/null; then
		cat "$work/shop.log" >&2
		echo "k6 smoke: the shop did not start" >&2
		exit 1
	fi
	addr=
	sleep 0.1
done
if [ -z "$addr" ]; then
	cat "$work/shop.log" >&2
	echo "k6 smoke: the shop is not ready after 60 s" >&2
	exit 1
fi
echo "k6 smoke: shop on http://$addr"

# The shim first proves it can fail: its self-test crosses exactly two
# thresholds on purpose and must exit 99 naming them.
set +e
node shim/run.mjs -e BASE_URL="http://$addr" shim/selftest.js >"$work/selftest.out" 2>&1
code=$?
set -e
if [ "$code" -ne 99 ] || ! grep -q "thresholds on metrics 'selftest_good, http_req_failed{name:missing}' have been crossed" "$work/selftest.out"; then
	cat "$work/selftest.out" >&2
	echo "k6 smoke: the shim's self-test did not fail as it must (exit $code)" >&2
	exit 1
fi
echo "k6 smoke: shim self-test OK (thresholds, checks, batch, sleep, setup data)"

status=0
for script in seckill-race retry-storm orders-idempotency pay-retry; do
	echo "== $script (smoke: setup() and a few iterations)"
	if ! node shim/run.mjs -e BASE_URL="http://$addr" -e ADMIN_TOKEN="$admin" -e RUN_ID="smoke$RANDOM" \
		-e USERS=8 -e STOCK=5 -e VUS=2 -e RATE=4 -e RETRIES=2 -e SUMMARY_DIR="$work/summaries" \
		--max-iterations 8 "$script.js"; then
		echo "k6 smoke: $script FAILED" >&2
		status=1
	fi
done

echo "== shop verify"
if ! "$shop" verify --mysql-dsn '' --sqlite-path "$work/shop.db" --redis-url '' --embedded-redis-addr 127.0.0.1:0; then
	echo "k6 smoke: shop verify found a violation" >&2
	status=1
fi
if [ "$status" -ne 0 ]; then
	echo "--- shop log" >&2
	tail -n 50 "$work/shop.log" >&2
fi
exit "$status"
