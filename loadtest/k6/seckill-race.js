// Flash sale: USERS buyers, logged in before the sale opens (setup), race
// for STOCK units, one seckill request each (retried on 503/429 as
// Retry-After says). The exit code is the verdict: more 201s than units, a
// buyer with two orders, an iteration that threw, or anything the audit
// finds in teardown() fails the run.
//
// SCENARIO picks the load:
//   spike (default)  ramping-arrival-rate: 0 -> RATE buyers/s within a second, held until every buyer came, then stop
//   race             every buyer at once: VUS VUs start together (per-vu-iterations), hundreds in flight
//   soak             constant-arrival-rate RATE/s for DURATION, with restocks (RESTOCK units every RESTOCK_EVERY)
//                    and unpaid returns (every third buyer cancels)
//
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e ADMIN_TOKEN=... -e USERS=5000 -e STOCK=500 -e RATE=2000 seckill-race.js
import http from 'k6/http';
import exec from 'k6/execution';
import { check } from 'k6';
import { Counter } from 'k6/metrics';
import {
  BASE_URL, INVARIANTS, RUN_ID, audit, body, code, createProduct, envInt, guard, params, retrying, summary,
  tokens, userBase,
} from './lib/shop.js';

const SCENARIO = __ENV.SCENARIO || 'spike';
const USERS = envInt('USERS', 5000);
const STOCK = envInt('STOCK', 500);
const RATE = envInt('RATE', 2000); // buyers per second at the peak
const VUS = envInt('VUS', 300);
const SLO_P99_MS = envInt('SLO_P99_MS', 100); // docs/slo: p99 of the seckill route
const RESTOCK = envInt('RESTOCK', 50);

const ordersCreated = new Counter('orders_created');
const soldOut = new Counter('sold_out');
const returned = new Counter('unpaid_returns');

// 409 sold_out and 503 busy/overloaded are answers the contract promises, not failures.
http.setResponseCallback(http.expectedStatuses({ min: 200, max: 299 }, 409, 503));

/** @returns {Record<string, import('k6/options').Scenario>} */
function scenarios() {
  if (SCENARIO === 'race') {
    return { race: { executor: 'per-vu-iterations', vus: Math.min(VUS, USERS), iterations: Math.ceil(USERS / Math.min(VUS, USERS)), maxDuration: '5m' } };
  }
  if (SCENARIO === 'soak') {
    return {
      buyers: { executor: 'constant-arrival-rate', rate: RATE, timeUnit: '1s', duration: __ENV.DURATION || '10m', preAllocatedVUs: VUS, maxVUs: VUS * 2 },
      restocks: { executor: 'constant-arrival-rate', exec: 'restock', rate: 1, timeUnit: __ENV.RESTOCK_EVERY || '30s', duration: __ENV.DURATION || '10m', preAllocatedVUs: 1 },
    };
  }
  // Every buyer comes once: half a second's worth during the ramp, the rest while it holds.
  const hold = Math.max(1, Math.ceil((USERS - RATE / 2) / RATE));
  return {
    spike: {
      executor: 'ramping-arrival-rate', startRate: 0, timeUnit: '1s',
      stages: [{ target: RATE, duration: '1s' }, { target: RATE, duration: `${hold}s` }],
      preAllocatedVUs: VUS, maxVUs: VUS * 2,
    },
  };
}

/** @type {Record<string, string[]>} */
const thresholds = {
  ...INVARIANTS,
  // The SLO of the seckill route, measured on the sale itself (not setup's logins).
  'http_req_duration{name:seckill}': [`p(99)<=${SLO_P99_MS}`],
  // A buyer the executor could not start is a buyer the test did not send.
  dropped_iterations: ['count==0'],
  'http_req_failed{name:seckill}': ['rate<0.01'],
};
// More 201s than units is an oversell the clients saw (restocks and returns make it meaningless in the soak).
if (SCENARIO !== 'soak') thresholds.orders_created = [`count<=${STOCK}`];

/** @type {import('k6/options').Options} */
export const options = {
  scenarios: scenarios(),
  setupTimeout: '10m',
  summaryTrendStats: ['avg', 'min', 'med', 'max', 'p(90)', 'p(95)', 'p(99)'],
  thresholds,
};

/** @typedef {{ productId: number, base: number, tokens: string[] }} Setup */

/** @returns {Setup} */
export function setup() {
  const productId = createProduct(`k6 flash sale ${SCENARIO} ${RUN_ID}`, STOCK, 990);
  const base = userBase();
  return { productId, base, tokens: tokens(base, USERS) };
}

/** @param {Setup} s */
export default function (s) {
  const i = exec.scenario.iterationInTest % USERS;
  if (SCENARIO !== 'soak' && exec.scenario.iterationInTest >= USERS) return;
  guard(() => buy(s, i));
}

/**
 * One buyer's seckill request (and, in the soak, every third buyer returning
 * the unpaid order).
 * @param {Setup} s
 * @param {number} i
 */
function buy(s, i) {
  const tok = s.tokens[i];
  const res = retrying(() => http.post(`${BASE_URL}/api/v1/seckill/${s.productId}/orders`, null, params(tok, undefined, { name: 'seckill' })));
  const b = body(res);
  if (res.status === 201) ordersCreated.add(1);
  if (res.status === 409 && code(res) === 'sold_out') soldOut.add(1);
  check(res, {
    'answer is 201, 200 replay, 409 sold_out, 409 unpaid_limit or 503': (r) =>
      r.status === 201 || r.status === 200 || (r.status === 409 && (code(r) === 'sold_out' || code(r) === 'unpaid_limit')) || r.status === 503,
    'an order answer names the buyer and has a Location': (r) =>
      r.status >= 300 || (b !== null && b.user_id === s.base + i + 1 && r.headers['Location'] === `/api/v1/orders/${b.order_no}`),
    '503 carries Retry-After': (r) => r.status !== 503 || r.headers['Retry-After'] !== undefined,
  });
  if (SCENARIO === 'soak' && res.status === 201 && i % 3 === 0) {
    const c = retrying(() => http.post(`${BASE_URL}/api/v1/orders/${b.order_no}/cancel`, null, params(tok, undefined, { name: 'cancel' })));
    if (check(c, { 'an unpaid order is returned: 200 cancelled': (r) => r.status === 200 && body(r).status === 'cancelled' })) returned.add(1);
  }
}

/** Soak: the admin restocks RESTOCK units now and then. @param {Setup} s */
export function restock(s) {
  const key = `k6-restock-${RUN_ID}-${exec.scenario.iterationInTest}`;
  const res = retrying(() => http.post(`${BASE_URL}/api/v1/admin/products/${s.productId}/restock`, JSON.stringify({ quantity: RESTOCK }),
    params(__ENV.ADMIN_TOKEN || '', key, { name: 'restock' })));
  check(res, { 'a restock answers 200': (r) => r.status === 200 });
}

/** The verdict of the database: the audit. @param {Setup} s */
export function teardown(s) {
  audit([s.productId]);
}

/** @param {any} data */
export function handleSummary(data) {
  return summary('seckill-race', data, thresholds);
}
