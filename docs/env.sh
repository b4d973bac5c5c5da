# Shell set-up for the chapters' commands. From the repository root:
#
#   source docs/env.sh
#
# Names the chapters use, with the defaults of docs/README.md "Before you
# start"; a value you exported before wins (a shop on another port:
# export SHOP=http://localhost:8090 first). Then a few helpers, so that the
# commands stay short. Works in bash and zsh.

export SHOP="${SHOP:-http://localhost:8080}"                      # the shop you started
export ADMIN_TOKEN="${ADMIN_TOKEN:-dev-admin-token-change-me}"     # its SHOP_ADMIN_TOKEN
export SHOP_REDIS_URL="${SHOP_REDIS_URL:-redis://127.0.0.1:6390}" # its Redis, for shop lab lock and redis-cli
export LAB_ADDR="${LAB_ADDR:-127.0.0.1:8081}"                      # where lab_shop_start puts a second shop

# call METHOD PATH [curl options...]: one request to $SHOP. Prints the status,
# the headers this course cares about (Idempotent-Replayed, Retry-After) and
# the body. call_status: the same without the body.
call() { _request body "$@"; }
call_status() { _request nobody "$@"; }

_request() {
	local mode=$1 method=$2 path=$3 hdr body
	shift 3
	hdr=$(mktemp)
	body=$(curl -s -D "$hdr" -X "$method" "$SHOP$path" "$@")
	tr -d '\r' <"$hdr" | awk 'NR == 1 { sub(/^HTTP\/[0-9.]+ /, ""); line = $0; next }
		tolower($0) ~ /^(idempotent-replayed|retry-after):/ { line = line "  " $0 }
		END { print line }'
	rm -f "$hdr"
	if [ "$mode" = body ]; then printf '%s\n' "$body"; fi
}

# login USER_ID: prints a user token (the demo login: no password).
login() {
	curl -sf -X POST "$SHOP/api/v1/auth/token" -H 'Content-Type: application/json' \
		-d "{\"user_id\": $1}" | jq -r .token
}

# new_user: prints a fresh random user id, so every chapter can be run again.
new_user() {
	echo $(((RANDOM << 15 | RANDOM) * 100 + RANDOM % 100 + 1))
}

# new_product NAME PRICE_CENTS STOCK: creates a product, prints its id.
new_product() {
	curl -sf -X POST "$SHOP/api/v1/admin/products" \
		-H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json' \
		-d "{\"name\": \"$1\", \"price_cents\": $2, \"stock\": $3}" | jq -r .id
}

# credit USER_ID CENTS: puts money in a wallet (admin route). Each call is a
# new credit, so each gets a new Idempotency-Key.
credit() {
	curl -sf -X POST "$SHOP/api/v1/admin/wallets/$1/credit" \
		-H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json' \
		-H "Idempotency-Key: credit-$1-$2-$RANDOM" -d "{\"amount_cents\": $2}" | jq -c .
}

# lab_shop_start [shop flags...]: starts a second, throw-away shop on
# $LAB_ADDR with its own SQLite file and its own in-process Redis, waits
# until it is ready, and sets LAB to its URL. Flags switch on the lab's
# unsafe modes, e.g. --stock-strategy naive. It starts without the demo
# catalog, so its audit shows only the exercise's products. Stop it with
# lab_shop_stop.
lab_shop_start() {
	LAB_DIR=$(mktemp -d)
	LAB="http://$LAB_ADDR"
	shop serve --addr "$LAB_ADDR" --sqlite-path "$LAB_DIR/shop.db" --redis-url '' \
		--embedded-redis-addr 127.0.0.1:0 --admin-token "$ADMIN_TOKEN" --demo-catalog false "$@" >"$LAB_DIR/shop.log" 2>&1 &
	LAB_PID=$!
	local i
	for i in $(seq 300); do
		if curl -sf "$LAB/readyz" >/dev/null; then
			echo "lab shop ready on $LAB ($*)"
			return 0
		fi
		if ! kill -0 "$LAB_PID" 2>/dev/null; then break; fi
		sleep 0.1
	done
	echo "the lab shop did not start:" >&2
	cat "$LAB_DIR/shop.log" >&2
	return 1
}

# lab_shop_stop: stops the lab shop and removes its folder (SQLite file, log).
lab_shop_stop() {
	kill "$LAB_PID" 2>/dev/null || true
	wait "$LAB_PID" 2>/dev/null || true
	if [ -n "${LAB_DIR:-}" ]; then rm -rf "$LAB_DIR"; fi
	LAB_DIR=
}

# race BASE_URL STOCK BUYERS: the lab's flash sale (POST /api/v1/admin/lab/races
# on that shop): BUYERS distinct users each try to buy one unit of a new
# product with STOCK units. Waits for the end and prints the tally and the
# audit's verdict.
race() {
	local base=$1 id s i
	id=$(curl -sf -X POST "$base/api/v1/admin/lab/races" \
		-H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json' \
		-d "{\"stock\": $2, \"buyers\": $3, \"concurrency\": 50}" | jq -r .race_id)
	for i in $(seq 600); do
		s=$(curl -sf "$base/api/v1/admin/lab/races/$id" -H "Authorization: Bearer $ADMIN_TOKEN")
		if [ "$(jq -r .done <<<"$s")" = true ]; then
			jq -r '"strategy \(.stock_strategy): \(.initial_stock) units, \(.buyers) buyers -> \(.created) orders, \(.sold_out) sold out, \(.busy) busy, stock left \(.stock), oversold \(.oversold)",
				"audit ok: \(.audit.ok)",
				(.audit.violations[]? | "  \(.invariant): \(.detail)")' <<<"$s"
			return 0
		fi
		sleep 0.2
	done
	echo "race $id did not finish" >&2
	return 1
}

# wait_for_key KEY: waits (up to 5 s) until KEY exists in the shop's Redis,
# e.g. until a `shop lab lock` started in the background holds its lock.
wait_for_key() {
	local i
	for i in $(seq 100); do
		if [ "$(redis-cli -u "$SHOP_REDIS_URL" EXISTS "$1")" = 1 ]; then return 0; fi
		sleep 0.05
	done
	echo "$1 did not appear in $SHOP_REDIS_URL" >&2
	return 1
}

# gap_ms FILE1 EVENT1 FILE2 EVENT2: milliseconds from EVENT1 in FILE1 to
# EVENT2 in FILE2 (files of `shop lab lock` JSON lines).
gap_ms() {
	jq -rn --slurpfile a "$1" --arg ea "$2" --slurpfile b "$3" --arg eb "$4" '
		def secs: capture("T(?<h>[0-9]{2}):(?<m>[0-9]{2}):(?<s>[0-9.]+)Z")
			| (.h | tonumber) * 3600 + (.m | tonumber) * 60 + (.s | tonumber);
		[$a[] | select(.event == $ea) | .at | secs][0] as $from
		| [$b[] | select(.event == $eb) | .at | secs][0] as $to
		| (($to - $from) * 1000 | floor)'
}

# metric NAME: the value of a Prometheus metric of $SHOP, summed over its
# labels (e.g. metric shop_orders_replayed_total).
metric() {
	curl -s "$SHOP/metrics" | awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $2 } END { printf "%g\n", s }'
}
