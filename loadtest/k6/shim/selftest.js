// The shim checks itself before the smoke run trusts it: this script must
// make run.mjs exit 99 (thresholds crossed) and report exactly the
// expectations below; smoke.sh compares. It needs a shop at BASE_URL.
import http from 'k6/http';
import exec from 'k6/execution';
import { check, group, sleep } from 'k6';
import { Counter, Rate, Trend } from 'k6/metrics';

const things = new Counter('selftest_things');
const good = new Rate('selftest_good');
const waits = new Trend('selftest_waits');

export const options = {
  scenarios: { s: { executor: 'per-vu-iterations', vus: 2, iterations: 2 } },
  thresholds: {
    selftest_things: ['count==4'], // holds: 2 VUs x 2 iterations
    selftest_good: ['rate>0.9'], // crossed: half are bad
    selftest_waits: ['p(50)<1000'], // holds
    'http_req_failed{name:missing}': ['rate<0.5'], // crossed: every 404 fails
    'http_req_failed{name:health}': ['rate==0'], // holds
  },
};

export function setup() {
  return { started: Date.now() };
}

/** @param {{ started: number }} s */
export default function (s) {
  if (typeof s.started !== 'number') throw new Error('setup() data did not reach the VU');
  group('pair', () => {
    const [a, b] = http.batch([
      ['GET', `${__ENV.BASE_URL}/healthz`, null, { tags: { name: 'health' } }],
      ['GET', `${__ENV.BASE_URL}/api/v1/products/0`, null, { tags: { name: 'missing' } }],
    ]);
    check(a, { 'healthz 200': (r) => r.status === 200 });
    check(b, { 'unknown product 404 problem+json': (r) => r.status === 404 && String(r.headers['Content-Type']).startsWith('application/problem+json') });
  });
  const t0 = Date.now();
  sleep(0.05);
  waits.add(Date.now() - t0);
  if (Date.now() - t0 < 45) throw new Error('sleep did not block');
  things.add(1);
  good.add(exec.vu.idInTest === 1);
}
