// Payments: each buyer gets a seckill order and pays it three times at once
// with one Idempotency-Key, retries with that key, then pays again with a
// new key. One charge per order: one fresh 200, replays of it, and
// 409 already_paid for the new key. Then `shop verify` proves M1/M2 from the
// database (one payment per order, balance = credits - payments >= 0).
//
//   k6 run -e BASE_URL=... -e ADMIN_TOKEN=... -e USERS=500 pay-retry.js
import http from 'k6/http';
import exec from 'k6/execution';
import { check, sleep } from 'k6';
import { Counter } from 'k6/metrics';
import { ADMIN_TOKEN, BASE_URL, RUN_ID, body, code, createProduct, envInt, params, summary, userBase, vuTokens } from './lib/shop.js';

const USERS = envInt('USERS', 500);
const VUS = Math.min(envInt('VUS', 50), USERS);
const PER_VU = Math.ceil(USERS / VUS);
const PRICE = 990;

const ordersCreated = new Counter('orders_created');
const charged = new Counter('payments_charged');
const replays = new Counter('replays');

http.setResponseCallback(http.expectedStatuses({ min: 200, max: 299 }, 409, 503));

/** @type {import('k6/options').Options} */
export const options = {
  scenarios: {
    pay: { executor: 'per-vu-iterations', vus: VUS, iterations: PER_VU, maxDuration: __ENV.MAX_DURATION || '5m' },
  },
  setupTimeout: '5m',
  thresholds: {
    http_req_failed: ['rate<0.01'],
    checks: ['rate>0.99'],
    payments_charged: [`count<=${USERS}`],
  },
};

/** @typedef {{ productId: number, base: number }} Setup */

/** @returns {Setup} */
export function setup() {
  const productId = createProduct(`k6 pay ${RUN_ID}`, USERS, PRICE);
  const base = userBase() + 150_000_000;
  for (let i = 0; i < USERS; i++) {
    const res = http.post(`${BASE_URL}/api/v1/admin/wallets/${base + i + 1}/credit`, JSON.stringify({ amount_cents: PRICE * 2 }),
      params(ADMIN_TOKEN, `k6-credit-${RUN_ID}-${i}`));
    if (res.status !== 200) throw new Error(`credit: HTTP ${res.status} ${res.body}`);
  }
  return { productId, base };
}

/**
 * Sends req until it is not busy or in use.
 * @param {() => import('k6/http').RefinedResponse<any>} req
 */
function untilSettled(req) {
  let res = req();
  for (let n = 0; n < 10 && (res.status === 503 || code(res) === 'idempotency_key_in_use'); n++) {
    sleep(0.1 * (n + 1));
    res = req();
  }
  return res;
}

/** @param {Setup} s */
export default function (s) {
  const first = (exec.vu.idInTest - 1) * PER_VU;
  const i = first + exec.vu.iterationInScenario;
  if (i >= USERS) return;
  const tok = vuTokens(s.base, first, Math.min(PER_VU, USERS - first))[i - first];
  const order = untilSettled(() => http.post(`${BASE_URL}/api/v1/seckill/${s.productId}/orders`, null, params(tok, undefined, { name: 'seckill' })));
  if (!check(order, { 'the buyer got its order': (r) => r.status === 201 || r.status === 200 })) return;
  // A 200 is a replay of an order made before (a retried send): not a new order.
  if (order.status === 201) ordersCreated.add(1);
  const no = body(order).order_no;
  const url = `${BASE_URL}/api/v1/orders/${no}/pay`;
  const key = `k6-pay-${RUN_ID}-${i}`;
  const p = params(tok, key, { name: 'pay' });
  const burst = http.batch([['POST', url, null, p], ['POST', url, null, p], ['POST', url, null, p]]);
  const retry = untilSettled(() => http.post(url, null, p));
  const other = untilSettled(() => http.post(url, null, params(tok, `${key}-new`, { name: 'pay' })));
  const all = [...burst, retry];
  const fresh = all.filter((r) => r.status === 200 && r.headers['Idempotent-Replayed'] !== 'true');
  charged.add(fresh.length);
  for (const r of all) if (r.headers['Idempotent-Replayed'] === 'true') replays.add(1);
  check(all, {
    'one charge per order (one fresh 200)': () => fresh.length <= 1,
    'the retry with the same key answers 200 paid': () => retry.status === 200 && body(retry).status === 'paid',
    'every 200 names the order, paid': (rs) => rs.every((r) => r.status !== 200 || (body(r).order_no === no && body(r).status === 'paid')),
  });
  check(other, { 'a new key on a paid order: 409 already_paid': (r) => r.status === 409 && code(r) === 'already_paid' });
  const wallet = http.get(`${BASE_URL}/api/v1/wallet`, params(tok));
  check(wallet, { 'the wallet was charged once': (r) => r.status === 200 && body(r).balance_cents === PRICE }); // credited 2x price
}

/** @param {any} data */
export function handleSummary(data) {
  return summary('pay-retry', data);
}
