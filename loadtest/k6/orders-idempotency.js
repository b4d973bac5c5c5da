// Regular orders with an Idempotency-Key: each buyer sends its order twice
// at once, then again (a retry), then the same key with another body. The
// contract: one 201, byte-identical replays with Idempotent-Replayed: true,
// 409 idempotency_key_in_use only while the first is running, 422 for the
// reused key. `shop verify` then proves one order per (user, key) (O2).
//
//   k6 run -e BASE_URL=... -e ADMIN_TOKEN=... -e USERS=1000 -e STOCK=1500 orders-idempotency.js
import http from 'k6/http';
import exec from 'k6/execution';
import { check, sleep } from 'k6';
import { Counter } from 'k6/metrics';
import { BASE_URL, RUN_ID, body, code, createProduct, envInt, params, summary, userBase, vuTokens } from './lib/shop.js';

const USERS = envInt('USERS', 1000);
const STOCK = envInt('STOCK', 1500);
const VUS = Math.min(envInt('VUS', 100), USERS);
const PER_VU = Math.ceil(USERS / VUS);

const ordersCreated = new Counter('orders_created');
const soldOut = new Counter('sold_out'); // insufficient_stock on this route
const replays = new Counter('replays');

http.setResponseCallback(http.expectedStatuses({ min: 200, max: 299 }, 409, 422, 503));

/** @type {import('k6/options').Options} */
export const options = {
  scenarios: {
    orders: { executor: 'per-vu-iterations', vus: VUS, iterations: PER_VU, maxDuration: __ENV.MAX_DURATION || '5m' },
  },
  setupTimeout: '5m',
  thresholds: {
    http_req_failed: ['rate<0.01'],
    checks: ['rate>0.99'],
    replays: ['count>0'],
  },
};

/** @typedef {{ productId: number, base: number }} Setup */

/** @returns {Setup} */
export function setup() {
  const productId = createProduct(`k6 regular ${RUN_ID}`, STOCK, 250);
  return { productId, base: userBase() + 100_000_000 };
}

/** @param {Setup} s */
export default function (s) {
  const from = (exec.vu.idInTest - 1) * PER_VU;
  const i = from + exec.vu.iterationInScenario;
  if (i >= USERS) return;
  const tok = vuTokens(s.base, from, Math.min(PER_VU, USERS - from))[i - from];
  const key = `k6-${RUN_ID}-${i}`;
  const qty = 1 + (i % 3);
  const url = `${BASE_URL}/api/v1/orders`;
  const p = params(tok, key, { name: 'order' });
  const payload = JSON.stringify({ product_id: s.productId, quantity: qty });
  const first = http.batch([['POST', url, payload, p], ['POST', url, payload, p]]);
  // Retry until the key is no longer in use (the first may still be running).
  let again = http.post(url, JSON.stringify({ quantity: qty, product_id: s.productId }), p);
  for (let n = 0; n < 5 && (code(again) === 'idempotency_key_in_use' || again.status === 503); n++) {
    sleep(0.2);
    again = http.post(url, payload, p);
  }
  const reused = http.post(url, JSON.stringify({ product_id: s.productId, quantity: qty + 1 }), p);
  const all = [...first, again];
  for (const res of all) {
    if (res.status === 201) ordersCreated.add(1);
    if (code(res) === 'insufficient_stock') soldOut.add(1);
    if (res.headers['Idempotent-Replayed'] === 'true') replays.add(1);
  }
  const done = all.filter((r) => r.status !== 503 && code(r) !== 'idempotency_key_in_use');
  // When neither first send finished (both 503 busy, or one in use and the
  // other busy), the retry may be the first to run the order: a fresh 201.
  const firstFinished = first.some((r) => r.status !== 503 && code(r) !== 'idempotency_key_in_use');
  check(all, {
    'at most one fresh 201 per key': (rs) => rs.filter((r) => r.status === 201 && r.headers['Idempotent-Replayed'] !== 'true').length <= 1,
    'every final answer of a key is the same bytes': () => done.every((r) => r.body === done[0].body),
    'the retry is a replay (once a first send finished)': () =>
      !firstFinished || again.status === 503 || code(again) === 'idempotency_key_in_use' || again.headers['Idempotent-Replayed'] === 'true',
    'an order answer holds the quantity asked': () => done.every((r) => r.status >= 300 || body(r).quantity === qty),
  });
  check(reused, {
    'same key, other body: 422 idempotency_key_reused': (r) => r.status === 422 && code(r) === 'idempotency_key_reused',
  });
}

/** @param {any} data */
export function handleSummary(data) {
  return summary('orders-idempotency', data);
}
