// Flash-sale race: USERS buyers, one seckill request each, for a product of
// STOCK units. Afterwards run `shop verify` against the same database: k6
// sees the answers, only the database can prove there was no oversell.
//
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e ADMIN_TOKEN=... -e USERS=5000 -e STOCK=500 seckill-race.js
import http from 'k6/http';
import exec from 'k6/execution';
import { check } from 'k6';
import { Counter } from 'k6/metrics';
import { BASE_URL, RUN_ID, body, code, createProduct, envInt, params, summary, userBase, vuTokens } from './lib/shop.js';

const USERS = envInt('USERS', 5000);
const STOCK = envInt('STOCK', 500);
const VUS = Math.min(envInt('VUS', 200), USERS);
const PER_VU = Math.ceil(USERS / VUS);

const ordersCreated = new Counter('orders_created');
const soldOut = new Counter('sold_out');
const replays = new Counter('replays');

// 409 sold_out and 503 busy are answers the contract promises, not failures.
http.setResponseCallback(http.expectedStatuses({ min: 200, max: 299 }, 409, 503));

/** @type {import('k6/options').Options} */
export const options = {
  scenarios: {
    race: {
      executor: 'per-vu-iterations',
      vus: VUS,
      iterations: PER_VU,
      maxDuration: __ENV.MAX_DURATION || '5m',
    },
  },
  setupTimeout: '5m',
  thresholds: {
    http_req_failed: ['rate<0.01'],
    checks: ['rate>0.99'],
    // More acknowledged orders than units is an oversell the clients can see.
    orders_created: [`count<=${STOCK}`],
    http_req_duration: ['p(99)<5000'],
  },
};

/**
 * @typedef {{ productId: number, base: number }} Setup
 */

/** @returns {Setup} */
export function setup() {
  const productId = createProduct(`k6 flash sale ${RUN_ID}`, STOCK, 990);
  return { productId, base: userBase() };
}

/** @param {Setup} s */
export default function (s) {
  const first = (exec.vu.idInTest - 1) * PER_VU;
  const i = first + exec.vu.iterationInScenario;
  if (i >= USERS) return;
  // Every VU logs its buyers in on its first iteration, before it races.
  const toks = vuTokens(s.base, first, Math.min(PER_VU, USERS - first));
  const res = http.post(`${BASE_URL}/api/v1/seckill/${s.productId}/orders`, null, params(toks[i - first], undefined, { name: 'seckill' }));
  const b = body(res);
  if (res.status === 201) ordersCreated.add(1);
  if (res.status === 409 && code(res) === 'sold_out') soldOut.add(1);
  if (res.headers['Idempotent-Replayed'] === 'true') replays.add(1);
  check(res, {
    'answer is 201, 200 replay, 409 sold_out or 503 busy': (r) =>
      r.status === 201 || r.status === 200 || (r.status === 409 && code(r) === 'sold_out') || (r.status === 503 && code(r) === 'busy'),
    'an order answer names the buyer and has a Location': (r) =>
      r.status >= 300 || (b !== null && b.user_id === s.base + i + 1 && r.headers['Location'] === `/api/v1/orders/${b.order_no}`),
    '503 carries Retry-After': (r) => r.status !== 503 || r.headers['Retry-After'] === '1',
  });
}

/** @param {any} data */
export function handleSummary(data) {
  return summary('seckill-race', data);
}
