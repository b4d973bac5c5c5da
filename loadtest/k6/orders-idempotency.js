// Regular orders with an Idempotency-Key: each buyer sends its order twice
// at once, then again (a retry), then the same key with another body. The
// contract: one 201, replays of it with Idempotent-Replayed: true (byte for
// byte while Redis holds the key; from the database after that, the same
// order: docs/api.md), 409 idempotency_key_in_use only while the first is
// running, 422 for the reused key. A key with two fresh 201s, or final
// answers naming two orders (or an order and a refusal), is a duplicate
// order and fails the run, as do an answer off the contract or a 5xx other
// than 503, a failed check, retries never answered by a replay, and
// anything the audit finds in teardown() (O2: one order per user and key).
//
//   k6 run -e BASE_URL=... -e ADMIN_TOKEN=... -e USERS=1000 -e STOCK=1500 orders-idempotency.js
import http from 'k6/http';
import exec from 'k6/execution';
import { check, sleep } from 'k6';
import { Counter } from 'k6/metrics';
import {
  BASE_URL, INVARIANTS, RUN_ID, audit, body, code, createProduct, duplicateOrders, envInt, guard, judge, params, summary, tokens, userBase,
} from './lib/shop.js';

const USERS = envInt('USERS', 1000);
const STOCK = envInt('STOCK', 1500);
const VUS = Math.min(envInt('VUS', 100), USERS);
const PER_VU = Math.ceil(USERS / VUS);

const soldOut = new Counter('sold_out'); // insufficient_stock on this route
const replays = new Counter('replays');

http.setResponseCallback(http.expectedStatuses({ min: 200, max: 299 }, 409, 422, 429, 503));

/** @type {Record<string, string[]>} */
const thresholds = {
  ...INVARIANTS,
  // The retries must be answered by replays, or the test did not test them.
  replays: ['count>0'],
};

/** @type {import('k6/options').Options} */
export const options = {
  scenarios: {
    orders: { executor: 'per-vu-iterations', vus: VUS, iterations: PER_VU, maxDuration: __ENV.MAX_DURATION || '5m' },
  },
  setupTimeout: '10m',
  thresholds,
};

/** @typedef {{ productId: number, base: number, tokens: string[] }} Setup */

/** @returns {Setup} */
export function setup() {
  const productId = createProduct(`k6 regular ${RUN_ID}`, STOCK, 250);
  const base = userBase() + 100000000;
  return { productId, base, tokens: tokens(base, USERS) };
}

/** @param {Setup} s */
export default function (s) {
  const i = exec.scenario.iterationInTest;
  if (i >= USERS) return;
  guard(() => order(s, i));
}

/** @param {Setup} s @param {number} i */
function order(s, i) {
  const tok = s.tokens[i];
  const key = `k6-${RUN_ID}-${i}`;
  const qty = 1 + (i % 3);
  const url = `${BASE_URL}/api/v1/orders`;
  const p = params(tok, key, { name: 'order' });
  const payload = JSON.stringify({ product_id: s.productId, quantity: qty });
  const first = http.batch([['POST', url, payload, p], ['POST', url, payload, p]]);
  const orderAnswers = [201, 200, '409:idempotency_key_in_use', '409:insufficient_stock', '409:unpaid_limit'];
  for (const res of first) judge(res, orderAnswers);
  // Retry until the key is no longer in use (the first may still be running).
  let again = http.post(url, JSON.stringify({ quantity: qty, product_id: s.productId }), p);
  for (let n = 0; n < 5 && (code(again) === 'idempotency_key_in_use' || again.status === 503 || again.status === 429); n++) {
    // Retry-After when the answer carries one (503, 429), else a short pause (409 in use).
    const after = parseInt(again.headers['Retry-After'] || '', 10);
    sleep(Number.isFinite(after) ? after : 0.2);
    again = http.post(url, payload, p);
  }
  judge(again, orderAnswers);
  const reused = judge(http.post(url, JSON.stringify({ product_id: s.productId, quantity: qty + 1 }), p),
    ['422:idempotency_key_reused', '409:idempotency_key_in_use']);
  const all = [...first, again];
  for (const res of all) {
    if (code(res) === 'insufficient_stock') soldOut.add(1);
    if (res.headers['Idempotent-Replayed'] === 'true') replays.add(1);
  }
  const done = all.filter((r) => r.status !== 503 && r.status !== 429 && code(r) !== 'idempotency_key_in_use');
  // When neither first send finished (both 503 busy, or one in use and the
  // other busy), the retry may be the first to run the order: a fresh 201.
  const firstFinished = first.some((r) => r.status !== 503 && r.status !== 429 && code(r) !== 'idempotency_key_in_use');
  const fresh = all.filter((r) => r.status === 201 && r.headers['Idempotent-Replayed'] !== 'true').length;
  // Two fresh 201s, or two final answers naming different orders (or an
  // order and a refusal), are two orders for one key. Answers are compared
  // by what they name, not byte for byte: a replay the database answers
  // after Redis forgot the key is the same order in other bytes (docs/api.md).
  const ids = new Set(done.map(identity));
  if (fresh > 1 || ids.size > 1) duplicateOrders.add(1, { key });
  check(all, {
    'the retry is a replay (once a first send finished)': () =>
      !firstFinished || again.status === 503 || again.status === 429 || code(again) === 'idempotency_key_in_use' || again.headers['Idempotent-Replayed'] === 'true',
    'an order answer holds the quantity asked': () => done.every((r) => r.status >= 300 || body(r).quantity === qty),
  });
  check(reused, {
    'same key, other body: 422 idempotency_key_reused (or not now)': (r) =>
      (r.status === 422 && code(r) === 'idempotency_key_reused') || r.status === 503 || r.status === 429 || code(r) === 'idempotency_key_in_use',
  });
}

/**
 * What a final answer names: the order of a 2xx, else its status and code.
 * @param {import('k6/http').RefinedResponse<any>} r
 */
function identity(r) {
  if (r.status >= 200 && r.status < 300) {
    const b = body(r);
    return `order ${b && b.order_no}`;
  }
  return `${r.status} ${code(r)}`;
}

/** @param {Setup} s */
export function teardown(s) {
  audit([s.productId]);
}

/** @param {any} data */
export function handleSummary(data) {
  return summary('orders-idempotency', data, thresholds);
}
