// Flash sale: USERS buyers, logged in before the sale opens (setup), race
// for STOCK units, one seckill request each (retried on 503/429 as
// Retry-After says). The exit code is the verdict: more 201s than units, a
// buyer with two orders, an answer off the contract or a 5xx other than
// 503, a failed check, no order at all, fewer than MIN_ANSWERED of the
// buyers answered (201/200/409), units left while buyers went without, or
// anything the audit finds in teardown() fails the run.
//
// Against a shop in the queued mode (SHOP_SECKILL_MODE=queue) a first
// request is 202 Accepted: the buyer follows its Location until the order is
// placed or rejected (FOLLOW_S seconds at most); a 202 whose order never
// shows up there is an accepted order lost (O3q), and fails the run.
//
// SCENARIO picks the load:
//   spike (default)  ramping-arrival-rate: a step to RATE buyers/s at the sale's opening, held until every buyer came
//   race             every buyer at once: VUS VUs start together (per-vu-iterations), hundreds in flight
//   soak             constant-arrival-rate RATE/s for DURATION, with restocks (RESTOCK units every RESTOCK_EVERY)
//                    and unpaid returns (every third buyer cancels)
//
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e ADMIN_TOKEN=... -e USERS=5000 -e STOCK=500 -e RATE=2000 seckill-race.js
import http from 'k6/http';
import exec from 'k6/execution';
import { check, sleep } from 'k6';
import { Counter } from 'k6/metrics';
import {
  BASE_URL, INVARIANTS, MIN_ANSWERED, RUN_ID, answered, audit, body, code, createProduct, envInt, guard, judge, notNow, params, retrying,
  summary, tokens, userBase,
} from './lib/shop.js';

const SCENARIO = __ENV.SCENARIO || 'spike';
const USERS = envInt('USERS', 5000);
const STOCK = envInt('STOCK', 500);
const RATE = envInt('RATE', 2000); // buyers per second at the peak
const VUS = envInt('VUS', 300);
const SLO_P99_MS = envInt('SLO_P99_MS', 100); // docs/slo: p99 of the seckill route; 0: not judged
const RESTOCK = envInt('RESTOCK', 50);
// The longest a buyer holds a VU in the spike, in seconds: five tries shed
// with 503 busy wait four Retry-After seconds, plus the answers.
const HOLD_S = envInt('HOLD_S', 6);
// How long a buyer with a 202 follows its order before counting it lost.
const FOLLOW_S = envInt('FOLLOW_S', 60);

const ordersCreated = new Counter('orders_created');
const soldOut = new Counter('sold_out');
const returned = new Counter('unpaid_returns');
const accepted = new Counter('orders_accepted'); // 202: queued mode
const acceptedLost = new Counter('accepted_lost'); // a 202 never placed nor rejected within FOLLOW_S

// 409 sold_out and 503 busy/overloaded are answers the contract promises, not failures.
http.setResponseCallback(http.expectedStatuses({ min: 200, max: 299 }, 409, 429, 503));

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
  // A sale opens at once: a step to RATE buyers/s (startRate), held until
  // every buyer came. k6 starts arrival n at n/RATE, so the stage lasts a
  // little longer than USERS/RATE and the last buyer does not fall on its
  // end (an arrival there is never started); arrivals past USERS do nothing.
  // A buyer shed with 503 busy holds its VU up to HOLD_S seconds: the VUs
  // are there from the start (an unplanned VU is made one at a time, and
  // arrivals meanwhile are dropped), enough for RATE x HOLD_S buyers at once.
  const stageMs = Math.ceil(((USERS + 0.5) * 1000) / RATE);
  const extra = Math.floor((RATE * stageMs) / 1000) - USERS;
  const vus = Math.min(USERS, Math.ceil(RATE * HOLD_S)) + extra;
  return {
    spike: {
      executor: 'ramping-arrival-rate', startRate: RATE, timeUnit: '1s',
      stages: [{ target: RATE, duration: `${stageMs}ms` }],
      preAllocatedVUs: vus, maxVUs: vus,
    },
  };
}

/** @type {Record<string, string[]>} */
const thresholds = {
  ...INVARIANTS,
  // A buyer the executor could not start is a buyer the test did not send.
  dropped_iterations: ['count==0'],
  // A shop that sends (almost) everyone away is not selling.
  answered: [`rate>=${MIN_ANSWERED}`],
  // Queued mode (O3q): every 202 ends as an order or a rejection.
  accepted_lost: ['count==0'],
};
// The SLO of the seckill route, measured on the sale itself (not setup's
// logins); SLO_P99_MS=0 leaves it unjudged (the Node runner, README).
if (SLO_P99_MS > 0) thresholds['http_req_duration{name:seckill}'] = [`p(99)<=${SLO_P99_MS}`];
// More 201s than units is an oversell the clients saw (restocks and returns
// make it meaningless in the soak); no 201 at all is a sale that never sold.
if (SCENARIO !== 'soak') thresholds.orders_created = ['count>0', `count<=${STOCK}`];
else thresholds.orders_created = ['count>0'];
// Units left while more buyers came than units: read by teardown() from the audit.
if (SCENARIO !== 'soak' && USERS > STOCK) thresholds.undersold_units = ['count==0'];

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
  const res = judge(retrying(() => http.post(`${BASE_URL}/api/v1/seckill/${s.productId}/orders`, null, params(tok, undefined, { name: 'seckill' }))),
    [201, 202, 200, '409:sold_out', '409:unpaid_limit']);
  answered.add(res.status === 201 || res.status === 202 || res.status === 200 || res.status === 409);
  const b = body(res);
  if (res.status === 201) ordersCreated.add(1);
  if (res.status === 202) follow(tok, res.headers['Location']);
  if (res.status === 409 && code(res) === 'sold_out') soldOut.add(1);
  check(res, {
    'answer is 201, 202 accepted, 200 replay, 409 sold_out, 409 unpaid_limit, 503 or 429': (r) =>
      r.status === 201 || r.status === 202 || r.status === 200 || (r.status === 409 && (code(r) === 'sold_out' || code(r) === 'unpaid_limit')) || notNow(r),
    'an order answer names the buyer and has a Location': (r) =>
      r.status >= 300 || (b !== null && b.user_id === s.base + i + 1 && r.headers['Location'] === `/api/v1/orders/${b.order_no}`),
    '503 and 429 carry Retry-After': (r) => !notNow(r) || r.headers['Retry-After'] !== undefined,
  });
  if (SCENARIO === 'soak' && res.status === 201 && i % 3 === 0) {
    const c = judge(retrying(() => http.post(`${BASE_URL}/api/v1/orders/${b.order_no}/cancel`, null, params(tok, undefined, { name: 'cancel' }))), [200]);
    if (notNow(c)) return;
    if (check(c, { 'an unpaid order is returned: 200 cancelled': (r) => r.status === 200 && body(r).status === 'cancelled' })) returned.add(1);
  }
}

/**
 * Queued mode: follows an accepted order (202) to its end. Placed counts as
 * an order created; rejected is an answer too (its unit went back); still
 * queued after FOLLOW_S seconds, or gone (404), is an accepted order lost.
 * @param {string} tok
 * @param {string} location
 */
function follow(tok, location) {
  accepted.add(1);
  for (let waited = 0; waited < FOLLOW_S * 1000; waited += 200) {
    const r = judge(http.get(`${BASE_URL}${location}`, params(tok, undefined, { name: 'follow' })), [200]);
    const o = body(r);
    if (r.status === 200 && o !== null && o.status !== 'queued') {
      if (o.status !== 'rejected') ordersCreated.add(1);
      return;
    }
    sleep(0.2);
  }
  acceptedLost.add(1);
  console.error(`accepted order lost: ${location} was not placed nor rejected within ${FOLLOW_S}s`);
}

/** Soak: the admin restocks RESTOCK units now and then. @param {Setup} s */
export function restock(s) {
  const key = `k6-restock-${RUN_ID}-${exec.scenario.iterationInTest}`;
  const res = judge(retrying(() => http.post(`${BASE_URL}/api/v1/admin/products/${s.productId}/restock`, JSON.stringify({ quantity: RESTOCK }),
    params(__ENV.ADMIN_TOKEN || '', key, { name: 'restock' }))), [200]);
  check(res, { 'a restock answers 200 (or not now)': (r) => r.status === 200 || notNow(r) });
}

/** The verdict of the database: the audit. @param {Setup} s */
export function teardown(s) {
  audit([s.productId], SCENARIO === 'soak' ? undefined : USERS);
}

/** @param {any} data */
export function handleSummary(data) {
  return summary('seckill-race', data, thresholds);
}
