// Shared helpers of the shop's k6 scripts: settings from __ENV, the API
// calls setup() needs, retries that honour Retry-After, the invariant
// counters, the audit that teardown() asks, and the summary. Everything here
// follows docs/api.md. Syntax: ES2020 without numeric separators, which k6
// parses since v0.54 only; the scripts need k6 v0.54.0 or newer anyway
// (README, "Which k6").
import http from 'k6/http';
import { check, sleep } from 'k6';
import { Counter, Rate } from 'k6/metrics';

/** Base URL of the shop (or its load balancer). */
export const BASE_URL = (__ENV.BASE_URL || 'http://127.0.0.1:8080').replace(/\/+$/, '');
/** Admin token of the shop (SHOP_ADMIN_TOKEN); setup() and teardown() need it. */
export const ADMIN_TOKEN = __ENV.ADMIN_TOKEN || '';
/** A run id that keeps keys and users of two runs apart. */
export const RUN_ID = __ENV.RUN_ID || String(Date.now());

// The invariants the clients can see. Each must stay at zero: a single
// count fails the run (threshold count==0, exit 99), never a percentage.
/** A buyer or key that got two orders (two 201s, or 2xx answers naming two orders). */
export const duplicateOrders = new Counter('duplicate_orders');
/** An order charged twice (two fresh 200s for one order, or a wallet debited twice). */
export const doubleCharges = new Counter('double_charges');
/** Units sold beyond what was added: from the audit's product rows (teardown). */
export const oversoldUnits = new Counter('oversold_units');
/** A violation the audit (GET /api/v1/admin/audit) found, tagged with its invariant. */
export const auditViolations = new Counter('audit_violations');
/** An iteration that threw (a body that is not the contract's, say). */
export const iterationErrors = new Counter('iteration_errors');
/** A 5xx other than the contract's 503s (invariant A1: never a 500), tagged with status and request name. */
export const serverErrors = new Counter('server_errors');
/** An answer the route's contract does not list (no answer at all, status 0, included), tagged with status and name. */
export const offContract = new Counter('off_contract');
/** Units left on a sale's product while buyers went without (teardown, from the audit's product rows). */
export const undersoldUnits = new Counter('undersold_units');
/** A 503 outcome_unknown: the order may exist or not; the request is retried with the same identity to learn which (A3). */
export const outcomeUnknown = new Counter('outcome_unknown');
/** A request answered outcome_unknown that its retries did not resolve within a minute (A3: each must resolve). */
export const outcomeUnknownUnresolved = new Counter('outcome_unknown_unresolved');
/** Per buyer: whether the shop gave a final answer (an order, or 409), not "not now" to the last retry. */
export const answered = new Rate('answered');

/** The least share of buyers that must get a final answer (MIN_ANSWERED, default 0.9). */
export const MIN_ANSWERED = Number(__ENV.MIN_ANSWERED || '0.9');

/**
 * The thresholds every script carries: the invariants, each a count that
 * must stay 0 (an empty counter is count 0 at the end of a k6 run, so these
 * pass when nothing happened), and every check.
 */
export const INVARIANTS = {
  duplicate_orders: ['count==0'],
  double_charges: ['count==0'],
  oversold_units: ['count==0'],
  audit_violations: ['count==0'],
  iteration_errors: ['count==0'],
  server_errors: ['count==0'],
  off_contract: ['count==0'],
  outcome_unknown_unresolved: ['count==0'],
  checks: ['rate==1'],
};

/**
 * An integer setting from __ENV.
 * @param {string} name
 * @param {number} def
 * @returns {number}
 */
export function envInt(name, def) {
  const v = __ENV[name];
  if (v === undefined || v === '') return def;
  const n = parseInt(v, 10);
  if (!Number.isFinite(n)) throw new Error(`${name} must be an integer, got ${v}`);
  return n;
}

/**
 * Users of a run are USER_BASE+1 .. USER_BASE+n; the base defaults to a
 * number derived from the run id, so reruns use fresh users.
 * @returns {number}
 */
export function userBase() {
  const fromEnv = envInt('USER_BASE', 0);
  if (fromEnv > 0) return fromEnv;
  return 1000000 + (Number(RUN_ID.replace(/\D/g, '').slice(-9)) % 1000000000) * 10;
}

/**
 * A W3C traceparent for one request: a new trace, sampled, so a shop with
 * tracing on (docs chapter 7, "Watching one purchase") records it under
 * this id whatever its own sampler says.
 * @returns {string}
 */
export function traceparent() {
  /** @param {number} n */
  const hex = (n) => Array.from({ length: n }, () => Math.floor(Math.random() * 16).toString(16)).join('');
  return `00-${hex(32)}-${hex(16)}-01`;
}

/**
 * JSON request parameters with optional bearer token and Idempotency-Key,
 * and a traceparent of its own (each call: a retry is a trace of its own).
 * @param {string} token
 * @param {string} [key]
 * @param {Record<string, string>} [tags]
 * @returns {import('k6/http').RefinedParams<'text'>}
 */
export function params(token, key, tags) {
  /** @type {Record<string, string>} */
  const headers = { 'Content-Type': 'application/json', traceparent: traceparent() };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (key) headers['Idempotency-Key'] = key;
  return { headers, tags: tags || {} };
}

/**
 * The JSON body of a response, or null.
 * @param {import('k6/http').RefinedResponse<any>} res
 * @returns {any}
 */
export function body(res) {
  try {
    return typeof res.body === 'string' && res.body !== '' ? JSON.parse(res.body) : null;
  } catch (_) {
    return null;
  }
}

/**
 * The problem+json code of an error answer, or ''.
 * @param {import('k6/http').RefinedResponse<any>} res
 * @returns {string}
 */
export function code(res) {
  const b = body(res);
  return b && typeof b.code === 'string' ? b.code : '';
}

/**
 * Whether an answer means "not now, nothing changed": 503 busy, unavailable
 * or overloaded (the last before the request was read), or 429. Not 503
 * outcome_unknown: see inDoubt.
 * @param {import('k6/http').RefinedResponse<any>} res
 */
export function notNow(res) {
  return (res.status === 503 || res.status === 429) && !inDoubt(res);
}

/**
 * Whether an answer is 503 outcome_unknown: the database did not tell in
 * time whether the order was placed. Neither a failure of the shop nor
 * "nothing happened": only a retry of the same request (same
 * Idempotency-Key, or the same buyer and product) learns the outcome, and
 * retrying() keeps retrying until it does.
 * @param {import('k6/http').RefinedResponse<any>} res
 */
export function inDoubt(res) {
  return res.status === 503 && code(res) === 'outcome_unknown';
}

/**
 * Counts an answer the route's contract does not list: a 5xx other than
 * 503 in server_errors, anything else in off_contract. `allowed` lists the
 * route's answers: a status (201), or a status and problem code
 * ('409:sold_out'); 503 and 429 ("not now") are always allowed.
 * @param {import('k6/http').RefinedResponse<any>} res
 * @param {(number|string)[]} allowed
 * @returns {import('k6/http').RefinedResponse<any>} res
 */
export function judge(res, allowed) {
  noteSlow(res);
  if (notNow(res) || inDoubt(res)) return res;
  const c = code(res);
  if (allowed.some((a) => (typeof a === 'number' ? res.status === a : a === `${res.status}:${c}`))) return res;
  const tags = { status: String(res.status), route: String(res.request && res.request.url ? route(res.request.url) : '') };
  if (res.status >= 500) serverErrors.add(1, tags);
  else offContract.add(1, tags);
  console.error(`off the contract: ${tags.route} answered ${res.status} ${c || (res.error || '')}`);
  return res;
}

// The slowest requests' trace ids. handleSummary sees aggregates only and
// VUs share nothing, but a check's name reaches it as written: each VU
// reports a request that is its slowest so far (after its first, a few: a
// new record among n requests comes about ln n times) as a passing check
// named with its duration and trace id, and summary() lists the SLOWEST
// slowest of them, apart from the checks. setup()'s and teardown()'s
// requests (__VU 0) are not the sale's and are left out.
const SLOW_CHECK = 'slowest request: ';
/** This VU's slowest request so far, in ms. */
let vuSlowestMs = -1;

/**
 * Reports res as a slow request if it is this VU's slowest so far.
 * @param {import('k6/http').RefinedResponse<any>} res
 */
function noteSlow(res) {
  if (__VU === 0 || !res.timings || res.timings.duration <= vuSlowestMs || !res.request) return;
  const tp = (res.request.headers && res.request.headers.Traceparent) || [];
  const traceId = String(tp[0] || '').split('-')[1];
  if (!traceId) return;
  vuSlowestMs = res.timings.duration;
  check(res, { [`${SLOW_CHECK}${vuSlowestMs.toFixed(1)} ms ${res.request.method} ${route(res.request.url)} ${res.status} trace ${traceId}`]: () => true });
}

/**
 * The SLOWEST (default 5) slow requests the VUs reported, slowest first,
 * and the checks without them.
 * @param {any} group the summary's root_group
 * @returns {{ slowest: string[], checks: any[] }}
 */
function slowestOf(group) {
  /** @type {any[]} */
  const checks = [];
  /** @type {string[]} */
  const slow = [];
  /** @param {any} g */
  const walk = (g) => {
    for (const c of g.checks || []) (c.name.startsWith(SLOW_CHECK) ? slow.push(c.name.slice(SLOW_CHECK.length)) : checks.push(c));
    for (const sub of g.groups || []) walk(sub);
  };
  walk(group);
  slow.sort((a, b) => parseFloat(b) - parseFloat(a));
  return { slowest: slow.slice(0, envInt('SLOWEST', 5)), checks };
}

/**
 * A URL's route, numbers and order numbers replaced (for tags).
 * @param {string} url
 */
function route(url) {
  return url.replace(/^https?:\/\/[^/]+/, '').replace(/\/[0-9]+(?=\/|$)/g, '/{id}').replace(/\/orders\/[A-Za-z0-9_-]{8,}/, '/orders/{no}');
}

/**
 * Sends until the answer is not "not now", at most `tries` times, waiting
 * as long as Retry-After says (seconds; 1 when absent), as docs/api.md asks
 * of a client. The same request (same Idempotency-Key) each time.
 * @param {() => import('k6/http').RefinedResponse<any>} send
 * @param {number} [tries]
 */
export function retrying(send, tries = 5) {
  let res = send();
  // An outcome_unknown is retried to learn it, past `tries`, for up to a
  // minute: meanwhile the shop keeps the request's idempotency claim (409
  // idempotency_key_in_use) until it learns the outcome itself.
  let learning = false;
  const learnUntil = Date.now() + 60000;
  for (let n = 1; ; n++) {
    if (inDoubt(res)) {
      outcomeUnknown.add(1);
      learning = true;
    }
    const again = n < tries && notNow(res);
    const learn = learning && Date.now() < learnUntil && (notNow(res) || inDoubt(res) || code(res) === 'idempotency_key_in_use');
    if (!again && !learn) break;
    const after = parseInt(res.headers['Retry-After'] || '', 10);
    sleep(Number.isFinite(after) && after >= 0 ? Math.min(after, 30) : 1);
    res = send();
  }
  if (learning && (inDoubt(res) || notNow(res) || code(res) === 'idempotency_key_in_use')) {
    outcomeUnknownUnresolved.add(1);
    console.error(`outcome_unknown not resolved by a minute of retries: last answer ${res.status} ${code(res)}`);
  }
  return res;
}

/**
 * Runs one iteration's body; an exception is counted in iteration_errors
 * (and logged) instead of only being logged, as k6 would do with it.
 * @param {() => void} fn
 */
export function guard(fn) {
  try {
    fn();
  } catch (e) {
    iterationErrors.add(1);
    console.error(`iteration error: ${e}`);
  }
}

/**
 * Creates a product of the run (admin, idempotent under the run id).
 * @param {string} name
 * @param {number} stock
 * @param {number} priceCents
 * @returns {number} the product id
 */
export function createProduct(name, stock, priceCents) {
  if (!ADMIN_TOKEN) throw new Error('ADMIN_TOKEN is required (the shop\'s SHOP_ADMIN_TOKEN)');
  const key = `k6-product-${RUN_ID}-${name.replace(/[^A-Za-z0-9]/g, '-')}`;
  const res = retrying(() => http.post(`${BASE_URL}/api/v1/admin/products`, JSON.stringify({ name, price_cents: priceCents, stock }),
    params(ADMIN_TOKEN, key, { name: 'admin' })));
  if (res.status !== 201 && res.status !== 200) throw new Error(`create product: HTTP ${res.status} ${res.body}`);
  return body(res).id;
}

/**
 * Logs users base+1 .. base+n in (demo login) and returns their tokens by
 * index. Meant for setup(): the buyers are ready before the sale opens, so
 * no login is measured with it. http.batch sends six at a time to one host
 * (k6's batchPerHost), 100 per call here.
 * @param {number} base
 * @param {number} n
 * @returns {string[]}
 */
export function tokens(base, n) {
  /** @type {string[]} */
  const out = [];
  for (let i = 0; i < n; i += 100) {
    /** @type {import('k6/http').BatchRequests} */
    const reqs = [];
    for (let j = i; j < Math.min(n, i + 100); j++) {
      reqs.push(['POST', `${BASE_URL}/api/v1/auth/token`, JSON.stringify({ user_id: base + j + 1 }), params('', undefined, { name: 'login' })]);
    }
    // A 429 or 503 is sent again as Retry-After says, the others kept, up to five rounds.
    /** @type {(import('k6/http').RefinedResponse<any>|null)[]} */
    const got = new Array(reqs.length).fill(null);
    let todo = reqs.map((_, k) => k);
    let wait = 0;
    for (let round = 0; round < 5 && todo.length > 0; round++) {
      if (round > 0) sleep(wait);
      const answers = http.batch(todo.map((k) => reqs[k]));
      wait = 0;
      /** @type {number[]} */
      const again = [];
      answers.forEach((res, k) => {
        got[todo[k]] = res;
        if (notNow(res)) {
          again.push(todo[k]);
          const after = parseInt(res.headers['Retry-After'] || '', 10);
          wait = Math.max(wait, Number.isFinite(after) && after >= 0 ? Math.min(after, 30) : 1);
        }
      });
      todo = again;
    }
    for (const res of got) {
      if (!res || res.status !== 200) throw new Error(`login: HTTP ${res ? res.status : 0} ${res ? res.body : ''}`);
      out.push(body(res).token);
    }
  }
  return out;
}

/**
 * teardown()'s verdict: asks the shop-wide audit (GET /api/v1/admin/audit)
 * and counts what is off, so that thresholds fail the run: every violation
 * in audit_violations (tagged with its invariant), and the units sold beyond
 * what was added to the run's products in oversold_units. It uses `ok` and
 * the violations list; the `lab` section (lab races, whose violations are
 * the lesson of the race) changes neither and is not read. An audit that
 * does not answer throws: the run cannot be judged.
 *
 * With `buyers` (a sale where each buyer wants one unit), units left on a
 * product to which more buyers came than units were added are counted in
 * undersold_units: each is a buyer sent away (told sold_out, or "not now"
 * to the last retry) while the unit was there.
 * @param {number[]} products the run's products
 * @param {number} [buyers]
 */
export function audit(products, buyers) {
  const res = retrying(() => http.get(`${BASE_URL}/api/v1/admin/audit`, params(ADMIN_TOKEN, undefined, { name: 'audit' })));
  if (res.status !== 200) throw new Error(`audit: HTTP ${res.status} ${res.body}`);
  const a = body(res);
  for (const v of a.violations || []) {
    auditViolations.add(1, { invariant: String(v.invariant) });
    console.error(`audit: ${v.invariant} ${v.product_id !== undefined ? `product ${v.product_id}` : `user ${v.user_id}`}: ${v.detail}`);
  }
  for (const p of a.products || []) {
    if (!products.includes(p.product_id)) continue;
    const over = p.sold - p.returned - p.added;
    if (over > 0) {
      oversoldUnits.add(over, { seen_by: 'audit' });
      console.error(`audit: product ${p.product_id} oversold by ${over} units (added ${p.added}, sold ${p.sold}, returned ${p.returned})`);
    }
    if (buyers !== undefined && buyers > p.added && over < 0) {
      undersoldUnits.add(-over, { product: String(p.product_id) });
      console.error(`audit: product ${p.product_id} undersold: ${-over} units left (added ${p.added}, sold ${p.sold}, returned ${p.returned}) although ${buyers} buyers came`);
    }
  }
  if (!a.ok && (a.violations || []).length === 0) {
    auditViolations.add(1, { invariant: 'unknown' });
    console.error('audit: not ok, and no violation listed');
  }
}

/**
 * handleSummary's result: every thresholded metric with ✓ or ✗ per
 * threshold (k6 puts every thresholded metric in the summary; "no samples"
 * only for a k6 run with --no-thresholds), the checks with
 * their pass and fail counts, and the whole summary as JSON in SUMMARY_DIR
 * (default: the working directory).
 * @param {string} name
 * @param {any} data
 * @param {Record<string, any[]>} thresholds the script's options.thresholds
 * @returns {Record<string, string>}
 */
export function summary(name, data, thresholds) {
  const dir = (__ENV.SUMMARY_DIR || '.').replace(/\/+$/, '');
  const file = `${dir}/${name}-summary.json`;
  /** @type {string[]} */
  const lines = [`${name}: thresholds`];
  for (const key of Object.keys(thresholds)) {
    const m = data.metrics[key];
    if (!m || !m.thresholds) {
      lines.push(`  - ${key}: no samples (not evaluated)`);
      continue;
    }
    const shown = m.type === 'counter' ? `count=${m.values.count}`
      : m.type === 'rate' ? `rate=${m.values.rate.toFixed(4)} (${m.values.passes} of ${m.values.passes + m.values.fails})`
        : Object.keys(m.values).map((k) => `${k}=${Number(m.values[k]).toFixed(2)}`).join(' ');
    for (const [expr, r] of Object.entries(m.thresholds)) {
      lines.push(`  ${(/** @type {any} */ (r)).ok ? '✓' : '✗'} ${key} ${expr}  ${shown}`);
    }
  }
  const { slowest, checks } = slowestOf(data.root_group);
  lines.push(`${name}: checks`);
  for (const c of checks) lines.push(`  ${c.fails === 0 ? '✓' : '✗'} ${c.path}  passes=${c.passes} fails=${c.fails}`);
  lines.push(`${name}: slowest requests (ms, request, status, trace id)`);
  for (const s of slowest) lines.push(`  ${s}`);
  if (slowest.length === 0) lines.push('  none reported');
  lines.push(`${name}: summary written to ${file}`);
  return { [file]: JSON.stringify({ ...data, slowest_requests: slowest }, null, 2), stdout: lines.join('\n') + '\n' };
}
