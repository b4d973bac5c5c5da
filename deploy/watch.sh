# The watch stage of deploy/native.sh (--watch), sourced by it: it uses
# native.sh's port, work, pids, shop_pids, start_shop, admin, db and users.
#
# Beside the three shops and nginx it runs, all on loopback:
#   port+6  cmd/otlprecv, the OTLP/HTTP receiver the shops export spans to
#           (every request sampled for the stage)
#   port+7  cmd/alertrecv, the webhook Alertmanager notifies
#   port+8  Debian's prometheus-alertmanager with deploy/alertmanager
#   port+9  Debian's prometheus with deploy/prometheus, 1s scrapes and
#           evaluations, exemplar storage on (it then scrapes OpenMetrics)
# and proves, each with a deadline:
#   - the recording rules produce the committed-orders rate;
#   - the instance that serves the sale (nginx hashes a product to one),
#     stopped during the k6 spike, raises ShopInstanceDown, which reaches
#     the webhook; once restarted, the alert's resolution does too;
#   - the exemplars Prometheus stored on the latency histograms name traces
#     the receiver holds;
#   - no other alert fired (a correct sale raises none).
# ShopInstanceDown waits `for: 30s` in rules.yml; the stage's copy waits 5s,
# so the stage stays short (the rest of the rules are as committed).

otlp=127.0.0.1:$((port + 6)) hook=127.0.0.1:$((port + 7)) am=127.0.0.1:$((port + 8)) prom=127.0.0.1:$((port + 9))

# watch_fail MESSAGE: the stage's verdict, with where to look.
watch_fail() {
	echo "native: FAIL: $*" >&2
	exit 1
}

# until_deadline SECONDS COMMAND...: runs COMMAND every 0.25s until it
# succeeds (0) or SECONDS have passed (1).
until_deadline() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		((SECONDS < deadline)) || return 1
		sleep 0.25
	done
}

# watch_backends: otlprecv and alertrecv, and the shops' OTEL_ settings.
watch_backends() {
	go build -o "$work/otlprecv" ./cmd/otlprecv
	go build -o "$work/alertrecv" ./cmd/alertrecv
	"$work/otlprecv" --addr "$otlp" >"$work/otlprecv.log" 2>&1 &
	pids+=($!)
	"$work/alertrecv" --addr "$hook" >"$work/alertrecv.log" 2>&1 &
	pids+=($!)
	until_deadline 30 curl -sf -o /dev/null "http://$otlp/api/traces" || watch_fail "otlprecv does not answer on $otlp (see $work/otlprecv.log)"
	until_deadline 30 curl -sf -o /dev/null "http://$hook/alerts" || watch_fail "alertrecv does not answer on $hook (see $work/alertrecv.log)"
	# Every request traced, its spans sent within half a second.
	export OTEL_EXPORTER_OTLP_ENDPOINT=http://$otlp OTEL_SERVICE_NAME=shop OTEL_TRACES_SAMPLER=always_on OTEL_BSP_SCHEDULE_DELAY=500
}

# watch_prometheus: Alertmanager and Prometheus on the stage's ports.
watch_prometheus() {
	command -v prometheus >/dev/null || watch_fail "prometheus not found (Debian: apt-get install -y prometheus)"
	command -v prometheus-alertmanager >/dev/null || watch_fail "prometheus-alertmanager not found (Debian: apt-get install -y prometheus-alertmanager)"
	sed -e "s|url: http://127.0.0.1:9095/alerts|url: http://$hook/alerts|" deploy/alertmanager/alertmanager.yml >"$work/alertmanager.yml"
	grep -q "$hook" "$work/alertmanager.yml" || watch_fail "alertmanager.yml's webhook url not mapped"
	prometheus-alertmanager --config.file="$work/alertmanager.yml" --storage.path="$work/alertmanager" \
		--web.listen-address="$am" --cluster.listen-address= >"$work/alertmanager.log" 2>&1 &
	pids+=($!)
	sed -e '/alert: ShopInstanceDown/,/for:/ s/for: .*/for: 5s/' deploy/prometheus/rules.yml >"$work/rules.yml"
	grep -A2 'alert: ShopInstanceDown' "$work/rules.yml" | grep -q 'for: 5s' || watch_fail "rules.yml: ShopInstanceDown's for: not shortened"
	sed -e "s/\"shop1:8080\", \"shop2:8080\", \"shop3:8080\"/\"127.0.0.1:$((port + 1))\", \"127.0.0.1:$((port + 2))\", \"127.0.0.1:$((port + 3))\"/" \
		-e "s/\"alertmanager:9093\"/\"$am\"/" \
		-e 's/scrape_interval: .*/scrape_interval: 1s/' -e 's/evaluation_interval: .*/evaluation_interval: 1s/' \
		deploy/prometheus/prometheus.yml >"$work/prometheus.yml"
	grep -q "127.0.0.1:$((port + 3))" "$work/prometheus.yml" || watch_fail "prometheus.yml targets not mapped"
	grep -q "\"$am\"" "$work/prometheus.yml" || watch_fail "prometheus.yml's alertmanager not mapped"
	prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" --web.listen-address="$prom" \
		--enable-feature=exemplar-storage >"$work/prometheus.log" 2>&1 &
	pids+=($!)
}

# promql EXPR: the first sample's value of an instant query ("" if none).
promql() {
	curl -sf --get "http://$prom/api/v1/query" --data-urlencode "query=$1" | jq -r '.data.result[0].value[1] // empty'
}

all_up() { [ "$(promql 'count(up{job="shop"} == 1)')" = 3 ]; }

orders_rate_positive() {
	local r
	r=$(promql 'shop:orders_committed:rate1m')
	[ -n "$r" ] && awk -v r="$r" 'BEGIN { exit !(r > 0) }'
}

# served_seckill I: instance I has answered a seckill request.
served_seckill() {
	local m # not piped into grep -q: curl's SIGPIPE would fail the pipeline (pipefail)
	m=$(curl -sf "http://127.0.0.1:$((port + $1))/metrics") && grep -q '^shop_http_requests_total{.*route="/api/v1/seckill/:product_id/orders"' <<<"$m"
}

# find_victim: sets victim to the instance that answers the sale's seckill
# requests (nginx hashes the product to one instance), if one does yet.
find_victim() {
	local i
	for i in 1 2 3; do
		if served_seckill "$i"; then
			victim=$i
			return 0
		fi
	done
	return 1
}

# notified STATUS: the webhook got ShopInstanceDown for the victim with
# STATUS (firing or resolved).
notified() {
	curl -sf "http://$hook/alerts" | jq -e --arg s "$1" --arg i "127.0.0.1:$((port + victim))" \
		'any(.[]; .alerts[]? | .status == $s and .labels.alertname == "ShopInstanceDown" and .labels.instance == $i)' >/dev/null
}

# exited PID: the process has ended (a zombie, not yet reaped, has too).
exited() {
	local state
	state=$(ps -o stat= -p "$1") || return 0
	[[ $state == Z* ]]
}

# watch_kill: stops the instance that serves the sale (SIGTERM) once it
# does; nginx sends the rest of the sale to the next one.
watch_kill() {
	until_deadline 60 find_victim || watch_fail "no instance served a seckill request within 60s of the k6 start (see $work/k6.out)"
	kill -TERM "${shop_pids[victim]}"
	until_deadline 30 exited "${shop_pids[victim]}" || watch_fail "instance $victim did not stop within 30s of SIGTERM"
	wait "${shop_pids[victim]}" || true # reaped: its pid is no longer ours
	echo "native: instance $victim (it served the sale) stopped during the spike at +$((SECONDS - started))s"
}

# watch_k6: the k6 seckill-race spike through nginx, the instance serving
# it stopped while it runs.
watch_k6() {
	(cd loadtest/k6 && { [ -d node_modules/acorn ] || npm ci --no-audit --no-fund >/dev/null; })
	until_deadline 30 all_up || watch_fail "prometheus on $prom does not see the 3 shops up within 30s (see $work/prometheus.log)"
	# The spike (a step to RATE buyers/s) rather than every buyer at once:
	# a counter's series appears with its first increment, and rate() sees
	# only the increments after that, so the sale must span several scrapes.
	echo "native: prometheus on $prom scrapes the 3 shops; k6 seckill-race (spike) through nginx"
	mkdir -p "$work/summaries"
	node loadtest/k6/shim/run.mjs -e BASE_URL="http://127.0.0.1:$port" -e ADMIN_TOKEN="$admin" -e RUN_ID="watch$db" \
		-e SUMMARY_DIR="$work/summaries" -e SCENARIO=spike -e USERS="$users" -e STOCK=$((users / 3)) -e RATE=$((users / 6)) -e SLO_P99_MS=0 \
		loadtest/k6/seckill-race.js >"$work/k6.out" 2>&1 &
	local k6=$!
	pids+=($k6)
	watch_kill
	local code=0
	wait "$k6" || code=$?
	sed -n '/: thresholds$/,$p' "$work/k6.out"
	if [ "$code" -ne 0 ]; then cat "$work/k6.out" >&2; watch_fail "k6 seckill-race failed (exit $code) with instance $victim stopped during the spike"; fi
}

# watch_alert: ShopInstanceDown delivered, the victim restarted, resolution delivered.
watch_alert() {
	until_deadline 60 notified firing ||
		watch_fail "ShopInstanceDown for instance $victim did not reach the webhook within 60s (received: $(curl -sf "http://$hook/alerts" | jq -c '[.[].alerts[]? | [.status, .labels.alertname, .labels.instance]]'); see $work/alertmanager.log, $work/prometheus.log)"
	echo "native: ShopInstanceDown (instance $victim) reached the webhook at +$((SECONDS - started))s; restarting it"
	start_shop "$victim"
	until_deadline 60 notified resolved ||
		watch_fail "ShopInstanceDown for instance $victim was not resolved at the webhook within 60s of the restart (see $work/shop$victim.log, $work/alertmanager.log)"
	echo "native: its resolution reached the webhook at +$((SECONDS - started))s"
}

# exemplar_traces: the trace ids of the exemplars Prometheus stored on the
# request and lock-wait histograms since the stage began.
exemplar_traces() {
	curl -sf --get "http://$prom/api/v1/query_exemplars" \
		--data-urlencode 'query={__name__=~"shop_http_request_duration_seconds_bucket|shop_lock_wait_duration_seconds_bucket"}' \
		--data-urlencode "start=$start_epoch" --data-urlencode "end=$(date +%s)" |
		jq -r '[.data[].exemplars[].labels.trace_id // empty] | unique | .[]'
}

# missing_traces IDS...: the ids the receiver does not hold, on stdout.
missing_traces() {
	local id
	for id in "$@"; do curl -sf -o /dev/null "http://$otlp/api/traces/$id" || echo "$id"; done
}

have_exemplars() { [ -n "$(exemplar_traces)" ]; }
all_held() { [ -z "$(missing_traces "${exemplar_ids[@]}")" ]; }

# watch_exemplars: every exemplar's trace (the first 100) is held by
# otlprecv (spans are batched: they get 20s to arrive).
watch_exemplars() {
	until_deadline 20 have_exemplars || watch_fail "prometheus stored no exemplar on the latency histograms (is /metrics OpenMetrics? see $work/prometheus.log)"
	mapfile -t exemplar_ids < <(exemplar_traces | head -100)
	until_deadline 20 all_held || {
		local missing
		missing=$(missing_traces "${exemplar_ids[@]}" | head -5 | tr '\n' ' ')
		watch_fail "exemplars name traces otlprecv does not hold: $missing(of ${#exemplar_ids[@]}; receiver: $(curl -sf "http://$otlp/api/traces"))"
	}
	echo "native: ${#exemplar_ids[@]} exemplar trace ids from prometheus, all held by otlprecv ($(curl -sf "http://$otlp/api/traces"))"
}

# watch_sale: the stage's run and verdicts.
watch_sale() {
	started=$SECONDS start_epoch=$(date +%s)
	watch_k6
	until_deadline 15 orders_rate_positive || watch_fail "the recording rules produced no committed-orders rate (shop:orders_committed:rate1m)"
	watch_alert
	watch_exemplars
	until_deadline 30 all_up || watch_fail "prometheus does not see the 3 shops up within 30s of the restart"
	local firing
	firing=$(curl -sf "http://$prom/api/v1/alerts" | jq -r '[.data.alerts[] | select(.state == "firing") | .labels.alertname] | join(",")')
	echo "native: prometheus: shop:orders_committed:rate1m = $(promql 'shop:orders_committed:rate1m'), instances up 3/3, alerts firing: ${firing:-none}"
	[ -z "$firing" ] || watch_fail "alerts fired during a correct sale: $firing"
	echo "native: watch stage took $((SECONDS - started))s from the sale's start"
}
