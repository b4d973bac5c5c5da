// Payments: each buyer gets a seckill order and pays it three times at once
// with one Idempotency-Key, retries with that key, then pays again with a
// new key. One charge per order: one fresh 200, replays of it, and
// 409 already_paid for the new key. A second fresh 200, or a wallet debited
// more than once, is a double charge and fails the run, as do an answer off
// the contract or a 5xx other than 503, a failed check, no order placed,
// fewer than MIN_ANSWERED of the buyers given their order, and anything the
// audit finds in teardown() (M1/M2: one payment per order, balance =
// credits - payments >= 0).
//
//   k6 run -e BASE_URL=... -e ADMIN_TOKEN=... -e USERS=500 pay-retry.js
import http from 'k6/http';
import exec from 'k6/execution';
import { check, sleep } from 'k6';
import { Counter } from 'k6/metrics';
import {
  ADMIN_TOKEN, BASE_URL, INVARIANTS, MIN_ANSWERED, RUN_ID, answered, audit, body, code, createProduct, doubleCharges, envInt, guard, judge,
  notNow, params, retrying, summary, tokens, userBase,
} from './lib/shop.js';

const USERS = envInt('USERS', 500);
const VUS = Math.min(envInt('VUS', 50), USERS);
const PER_VU = Math.ceil(USERS / VUS);
const PRICE = 990;

const ordersCreated = new Counter('orders_created');
const charged = new Counter('payments_charged');
const replays = new Counter('replays');

http.setResponseCallback(http.expectedStatuses({ min: 200, max: 299 }, 409, 429, 503));

/** @type {Record<string, string[]>} */
const thresholds = {
  ...INVARIANTS,
  // No order placed: nothing was paid, nothing tested.
  orders_created: ['count>0'],
  answered: [`rate>=${MIN_ANSWERED}`],
};

/** @type {import('k6/options').Options} */
export const options = {
  scenarios: {
    pay: { executor: 'per-vu-iterations', vus: VUS, iterations: PER_VU, maxDuration: __ENV.MAX_DURATION || '5m' },
  },
  setupTimeout: '10m',
  thresholds,
};

/** @typedef {{ productId: number, base: number, tokens: string[] }} Setup */

/** @returns {Setup} */
export function setup() {
  const productId = createProduct(`k6 pay ${RUN_ID}`, USERS, PRICE);
  const base = userBase() + 150000000;
  for (let i = 0; i < USERS; i++) {
    const res = retrying(() => http.post(`${BASE_URL}/api/v1/admin/wallets/${base + i + 1}/credit`, JSON.stringify({ amount_cents: PRICE * 2 }),
      params(ADMIN_TOKEN, `k6-credit-${RUN_ID}-${i}`, { name: 'credit' })));
    if (res.status !== 200) throw new Error(`credit: HTTP ${res.status} ${res.body}`);
  }
  return { productId, base, tokens: tokens(base, USERS) };
}

/**
 * Sends req until it is not "not now" (waiting as Retry-After says) or the
 * key is no longer in use by the first send.
 * @param {() => import('k6/http').RefinedResponse<any>} req
 */
function untilSettled(req) {
  let res = retrying(req);
  for (let n = 0; n < 10 && code(res) === 'idempotency_key_in_use'; n++) {
    sleep(0.1 * (n + 1));
    res = retrying(req);
  }
  return res;
}

/** @param {Setup} s */
export default function (s) {
  const i = exec.scenario.iterationInTest;
  if (i >= USERS) return;
  guard(() => pay(s, i));
}

/** @param {Setup} s @param {number} i */
function pay(s, i) {
  const tok = s.tokens[i];
  const order = judge(untilSettled(() => http.post(`${BASE_URL}/api/v1/seckill/${s.productId}/orders`, null, params(tok, undefined, { name: 'seckill' }))),
    [201, 200]);
  // One unit per buyer: every buyer gets its order, unless told "not now" to the last retry.
  answered.add(order.status === 201 || order.status === 200);
  if (notNow(order)) return;
  if (!check(order, { 'the buyer got its order': (r) => r.status === 201 || r.status === 200 })) return;
  // A 200 is a replay of an order made before (a retried send): not a new order.
  if (order.status === 201) ordersCreated.add(1);
  const no = body(order).order_no;
  const url = `${BASE_URL}/api/v1/orders/${no}/pay`;
  const key = `k6-pay-${RUN_ID}-${i}`;
  const p = params(tok, key, { name: 'pay' });
  const payAnswers = [200, '409:idempotency_key_in_use', '409:already_paid'];
  const burst = http.batch([['POST', url, null, p], ['POST', url, null, p], ['POST', url, null, p]]);
  for (const r of burst) judge(r, payAnswers);
  const retry = judge(untilSettled(() => http.post(url, null, p)), payAnswers);
  const other = judge(untilSettled(() => http.post(url, null, params(tok, `${key}-new`, { name: 'pay' }))), payAnswers);
  const all = [...burst, retry];
  const fresh = all.filter((r) => r.status === 200 && r.headers['Idempotent-Replayed'] !== 'true');
  charged.add(fresh.length);
  if (fresh.length > 1) doubleCharges.add(fresh.length - 1, { order: no });
  for (const r of all) if (r.headers['Idempotent-Replayed'] === 'true') replays.add(1);
  check(all, {
    'the retry with the same key answers 200 paid (or not now)': () => notNow(retry) || (retry.status === 200 && body(retry).status === 'paid'),
    'every 200 names the order, paid': (rs) => rs.every((r) => r.status !== 200 || (body(r).order_no === no && body(r).status === 'paid')),
  });
  // Once the retry is a paid order, a new key is refused.
  if (!notNow(retry)) check(other, { 'a new key on a paid order: 409 already_paid (or not now)': (r) => notNow(r) || (r.status === 409 && code(r) === 'already_paid') });
  const wallet = judge(retrying(() => http.get(`${BASE_URL}/api/v1/wallet`, params(tok, undefined, { name: 'wallet' }))), [200]);
  check(wallet, { 'the wallet answers 200 (or not now)': (r) => r.status === 200 || notNow(r) });
  // Credited twice the price: one charge leaves one price.
  if (wallet.status === 200 && body(wallet).balance_cents < PRICE) doubleCharges.add(1, { wallet: String(s.base + i + 1) });
}

/** @param {Setup} s */
export function teardown(s) {
  audit([s.productId]);
}

/** @param {any} data */
export function handleSummary(data) {
  return summary('pay-retry', data, thresholds);
}
