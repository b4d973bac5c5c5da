// Retry storm: each buyer double-clicks (two seckill requests at once), then
// retries RETRIES times, the first retry after giving up on a client timeout
// shorter than the server's work. Every 2xx of one buyer must name the same
// order; the database check (`shop verify`) proves there is no second one.
//
//   k6 run -e BASE_URL=... -e ADMIN_TOKEN=... -e USERS=2000 -e STOCK=200 -e RATE=200 retry-storm.js
import http from 'k6/http';
import exec from 'k6/execution';
import { check } from 'k6';
import { Counter } from 'k6/metrics';
import { BASE_URL, RUN_ID, body, code, createProduct, envInt, params, summary, token, userBase } from './lib/shop.js';

const USERS = envInt('USERS', 2000);
const STOCK = envInt('STOCK', 200);
const RETRIES = envInt('RETRIES', 3);
const RATE = envInt('RATE', 200); // buyers starting per second

const ordersCreated = new Counter('orders_created');
const soldOut = new Counter('sold_out');
const replays = new Counter('replays');

http.setResponseCallback(http.expectedStatuses({ min: 200, max: 299 }, 409, 503));

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
  setupTimeout: '5m',
  thresholds: {
    // The deliberately given-up send of each buyer (a client timeout)
    // fails by design: the threshold is on the sends whose answer the
    // client waits for.
    'http_req_failed{send:answered}': ['rate<0.01'],
    checks: ['rate>0.99'],
    orders_created: [`count<=${STOCK}`],
  },
};

/** @typedef {{ productId: number, base: number }} Setup */

/** @returns {Setup} */
export function setup() {
  const productId = createProduct(`k6 retry storm ${RUN_ID}`, STOCK, 990);
  return { productId, base: userBase() + 50_000_000 };
}

/** @param {Setup} s */
export default function (s) {
  const i = exec.scenario.iterationInTest;
  if (i >= USERS) return;
  const url = `${BASE_URL}/api/v1/seckill/${s.productId}/orders`;
  // An arrival-rate VU does not know its buyers in advance: one login each.
  const tok = token(s.base + i + 1);
  const p = params(tok, undefined, { name: 'seckill', send: 'answered' });
  /** @type {import('k6/http').RefinedResponse<any>[]} */
  const answers = http.batch([['POST', url, null, p], ['POST', url, null, p]]);
  // The classic timeout-then-retry: the client gives up early...
  http.post(url, null, Object.assign({}, p, { timeout: '5ms', tags: { name: 'seckill', send: 'given-up' } }));
  // ...and retries with the same identity.
  for (let r = 0; r < RETRIES; r++) answers.push(http.post(url, null, p));
  /** @type {Set<string>} */
  const orders = new Set();
  for (const res of answers) {
    const b = body(res);
    if (res.status === 201) ordersCreated.add(1);
    if (res.status === 409 && code(res) === 'sold_out') soldOut.add(1);
    if (res.headers['Idempotent-Replayed'] === 'true') replays.add(1);
    if (res.status === 200 || res.status === 201) orders.add(b.order_no);
  }
  check(answers, {
    'at most one 201 per buyer': (rs) => rs.filter((r) => r.status === 201).length <= 1,
    'every 2xx of a buyer names one order': () => orders.size <= 1,
    'a buyer holding an order is never told sold out': (rs) => orders.size === 0 || rs.every((r) => code(r) !== 'sold_out'),
    'no 409 idempotency_key_in_use on the seckill route': (rs) => rs.every((r) => code(r) !== 'idempotency_key_in_use'),
  });
}

/** @param {any} data */
export function handleSummary(data) {
  return summary('retry-storm', data);
}
