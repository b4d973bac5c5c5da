#!/usr/bin/env bash
# The docker-compose.yml topology without Docker: Debian's nginx with
# deploy/nginx.conf (service names mapped to loopback ports), three shop
# instances on MariaDB + Redis, and the load-test harness driving the shop
# through nginx (--target). Run from the repository root:
#
#   bash deploy/native.sh                 # nginx as shipped: never resends a POST
#   bash deploy/native.sh --lb-retry      # lab: nginx resends a timed-out POST to the next instance
#   bash deploy/native.sh --lb-retry --no-idempotency   # ... and the shop's idempotency is off
#   bash deploy/native.sh --watch         # Prometheus scrapes the shops during a k6 sale (below)
#
# --watch runs Debian's prometheus and prometheus-alertmanager (apt-get
# install -y prometheus prometheus-alertmanager), cmd/otlprecv and
# cmd/alertrecv beside the shops and, instead of the harness, the k6
# seckill-race script's spike (the Node runner of loadtest/k6) through
# nginx, stopping instance 3 during it: deploy/watch.sh says what it proves.
#
# Needs nginx (apt-get install -y nginx), MariaDB on 127.0.0.1:3306 (root, no
# password) and Redis on 127.0.0.1:6379 (SHOP_NATIVE_REDIS_URL overrides it;
# a Cluster list works). Ports: nginx 18600, shops 18601-18603 (NATIVE_PORT
# moves them). Exit status is the harness's: with --no-idempotency it is
# expected to fail (duplicate orders), which is what the run shows.
set -euo pipefail
cd "$(dirname "$0")/.."

lb_retry=false no_idem=false watch=false
for a in "$@"; do
	case $a in
	--lb-retry) lb_retry=true ;;
	--no-idempotency) no_idem=true ;;
	--watch) watch=true ;;
	*) echo "native.sh: unknown argument $a" >&2; exit 2 ;;
	esac
done
port=${NATIVE_PORT:-18600}
redis_url=${SHOP_NATIVE_REDIS_URL:-redis://127.0.0.1:6379/0}
users=${NATIVE_USERS:-300}
work=$(mktemp -d /tmp/shop-native-XXXXXX)
chmod 755 "$work"
db=native_$(od -An -N5 -tx1 /dev/urandom | tr -d ' \n')
admin=native-admin-$db
pids=()

cleanup() {
	local code=$?
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do
		for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
	done
	mariadb -uroot -h127.0.0.1 -e "DROP DATABASE IF EXISTS $db" 2>/dev/null || true
	if [ "$code" -ne 0 ] || [ -n "${NATIVE_KEEP:-}" ]; then echo "native.sh: logs in $work"; else rm -rf "$work"; fi
	exit "$code"
}
trap cleanup EXIT

command -v nginx >/dev/null || { echo "native.sh: nginx not found (Debian: apt-get install -y nginx)" >&2; exit 1; }
mariadb -uroot -h127.0.0.1 -e "CREATE DATABASE $db CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
go build -o "$work/shop" ./cmd/shop
export SHOP_MYSQL_DSN="root@tcp(127.0.0.1:3306)/$db?parseTime=true&loc=UTC&charset=utf8mb4"
export SHOP_REDIS_URL=$redis_url SHOP_REDIS_PREFIX="$db:" SHOP_ADMIN_TOKEN=$admin SHOP_AUTH_SECRET="native-secret-$db-0123456789"
export SHOP_LOG_LEVEL=warn SHOP_LAB_NO_IDEMPOTENCY=$no_idem
"$work/shop" migrate >"$work/migrate.log" 2>&1

# A few lock holders on every instance pause past nginx's 1s read timeout
# (below the lock TTL), so that the lab switch has timed-out POSTs to resend
# (not when watching: a correct sale should raise no alert but the stopped
# instance's).
pause=(SHOP_LAB_PAUSE_AFTER_LOCK=1500ms SHOP_LAB_PAUSE_PROBABILITY=0.2)
if $watch; then
	pause=(SHOP_LAB_PAUSE_AFTER_LOCK=0)
	# shellcheck source=deploy/watch.sh
	source deploy/watch.sh
	watch_backends # otlprecv and alertrecv, before the shops export to the first
fi
shop_pids=()
# start_shop I: instance I (1-3) on port+I, its pid in shop_pids[I] and pids.
start_shop() {
	env SHOP_ADDR=127.0.0.1:$((port + $1)) "${pause[@]}" "$work/shop" serve >>"$work/shop$1.log" 2>&1 &
	shop_pids[$1]=$!
	pids+=($!)
}
for i in 1 2 3; do start_shop "$i"; done

# deploy/nginx.conf with the compose service names mapped to loopback ports.
sed -e "s/server shop1:8080/server 127.0.0.1:$((port + 1))/" -e "s/server shop2:8080/server 127.0.0.1:$((port + 2))/" \
	-e "s/server shop3:8080/server 127.0.0.1:$((port + 3))/" -e "s/listen 8080;/listen 127.0.0.1:$port;/" \
	deploy/nginx.conf >"$work/nginx.conf"
if $lb_retry; then
	# max_fails=0: a slow answer is a paused lock holder here, not a dead
	# instance; with passive health on, three timeouts take an instance
	# out and nginx answers 502 "no live upstreams" for 5s.
	sed -i -e 's/proxy_next_upstream error timeout;/proxy_next_upstream error timeout non_idempotent;/' \
		-e 's/proxy_read_timeout 30s;/proxy_read_timeout 1s;/' -e 's/max_fails=3/max_fails=0/' "$work/nginx.conf"
fi
grep -q "server 127.0.0.1:$((port + 3)) " "$work/nginx.conf" || { echo "native.sh: nginx.conf upstreams not mapped" >&2; exit 1; }
nginx -t -p "$work" -c "$work/nginx.conf" -g "pid $work/nginx.pid; daemon off;" 2>"$work/nginx-t.log" || { cat "$work/nginx-t.log" >&2; exit 1; }
nginx -p "$work" -c "$work/nginx.conf" -g "pid $work/nginx.pid; daemon off;" >"$work/access.log" 2>"$work/error.log" &
pids+=($!)

if $watch; then watch_prometheus; fi

echo "native: nginx 127.0.0.1:$port -> shops 127.0.0.1:$((port + 1))-$((port + 3)); nginx resends timed-out POSTs: $lb_retry; idempotency off: $no_idem"
# Behind a load balancer that resends POSTs, one client send can reach two
# instances: the second may answer the first's order as a replay, and after
# three timed-out tries nginx itself answers 504. Neither is the shop's
# doing, so in that lab the harness expects 504 and skips the client-history
# linearizability check (it assumes one send is one request); the database
# invariants (no oversell, no duplicate order) are judged as always.
lab=()
if $lb_retry; then lab=(--expect-5xx 504 --linearizability=false); fi

if $watch; then watch_sale; exit 0; fi
set +e
go run ./loadtest --target "http://127.0.0.1:$port" --admin-token "$admin" --scenario retry \
	--users "$users" --stock $((users / 4)) --retries 3 --concurrency 32 --timeout 10s "${lab[@]}" | tee "$work/harness.log"
code=${PIPESTATUS[0]}
set -e
resent=$(grep -c '"POST [^"]*" .* upstream=[^ ]*, ' "$work/access.log" || true)
posts=$(grep -c '"POST ' "$work/access.log" || true)
echo "native: nginx forwarded $posts POSTs and resent $resent of them to a second instance after a timeout"
exit "$code"
