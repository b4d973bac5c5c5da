// Retry storm: each buyer double-clicks (two seckill requests at once), then
// gives up on a send after 5 ms (a client timeout shorter than the server's
// work) and retries RETRIES times. Every 2xx of one buyer must name the same
// order: a second one is a duplicate order and fails the run, as do an
// answer off the contract or a 5xx other than 503, a failed check, no order
// at all, and anything the audit finds in teardown().
//
//   k6 run -e BASE_URL=... -e ADMIN_TOKEN=... -e USERS=2000 -e STOCK=200 -e RATE=200 retry-storm.js
import http from 'k6/http';
import exec from 'k6/execution';
import { check } from 'k6';
import { Counter } from 'k6/metrics';
import {
  BASE_URL, INVARIANTS, RUN_ID, audit, body, code, createProduct, duplicateOrders, envInt, guard, judge, params, retrying, summary,
  tokens, userBase,
} from './lib/shop.js';

const USERS = envInt('USERS', 2000);
const STOCK = envInt('STOCK', 200);
const RETRIES = envInt('RETRIES', 3);
const RATE = envInt('RATE', 200); // buyers starting per second

const ordersCreated = new Counter('orders_created');
const replays = new Counter('replays');

http.setResponseCallback(http.expectedStatuses({ min: 200, max: 299 }, 409, 429, 503));

/** @type {Record<string, string[]>} */
const thresholds = {
  ...INVARIANTS,
  // The deliberately given-up send of each buyer (a client timeout) is not
  // judged; every send whose answer the client waits for is (judge()).
  dropped_iterations: ['count==0'],
  // More 201s than units is an oversell the clients saw; none, no sale.
  orders_created: ['count>0', `count<=${STOCK}`],
};

/** @type {import('k6/options').Options} */
export const options = {
  scenarios: {
    storm: {
      executor: 'constant-arrival-rate',
      rate: RATE,
      timeUnit: '1s',
      duration: `${Math.max(1, Math.ceil(USERS / RATE))}s`,
      preAllocatedVUs: Math.min(USERS, RATE * 2),
      maxVUs: Math.min(USERS, RATE * 10),
    },
  },
  setupTimeout: '10m',
  thresholds,
};

/** @typedef {{ productId: number, base: number, tokens: string[] }} Setup */

/** @returns {Setup} */
export function setup() {
  const productId = createProduct(`k6 retry storm ${RUN_ID}`, STOCK, 990);
  const base = userBase() + 50000000;
  return { productId, base, tokens: tokens(base, USERS) };
}

/** @param {Setup} s */
export default function (s) {
  const i = exec.scenario.iterationInTest;
  if (i >= USERS) return;
  guard(() => storm(s, i));
}

/** @param {Setup} s @param {number} i */
function storm(s, i) {
  const url = `${BASE_URL}/api/v1/seckill/${s.productId}/orders`;
  const p = params(s.tokens[i], undefined, { name: 'seckill', send: 'answered' });
  /** @type {import('k6/http').RefinedResponse<any>[]} */
  const answers = http.batch([['POST', url, null, p], ['POST', url, null, p]]);
  // The classic timeout-then-retry: the client gives up early...
  http.post(url, null, Object.assign({}, p, { timeout: '5ms', tags: { name: 'seckill', send: 'given-up' } }));
  // ...and retries with the same identity, as long as Retry-After says.
  for (let r = 0; r < RETRIES; r++) answers.push(retrying(() => http.post(url, null, p)));
  for (const res of answers) judge(res, [201, 200, '409:sold_out', '409:unpaid_limit']);
  /** @type {Set<string>} */
  const orders = new Set();
  let fresh = 0;
  for (const res of answers) {
    if (res.status === 201) fresh++;
    if (res.headers['Idempotent-Replayed'] === 'true') replays.add(1);
    if (res.status === 200 || res.status === 201) orders.add(body(res).order_no);
  }
  ordersCreated.add(fresh);
  if (fresh > 1 || orders.size > 1) duplicateOrders.add(1, { buyer: String(s.base + i + 1) });
  check(answers, {
    'a buyer holding an order is never told sold out': (rs) => orders.size === 0 || rs.every((r) => code(r) !== 'sold_out'),
    'no 409 idempotency_key_in_use on the seckill route': (rs) => rs.every((r) => code(r) !== 'idempotency_key_in_use'),
  });
}

/** @param {Setup} s */
export function teardown(s) {
  audit([s.productId]);
}

/** @param {any} data */
export function handleSummary(data) {
  return summary('retry-storm', data, thresholds);
}
