// Shared helpers of the shop's k6 scripts: settings from __ENV, the API
// calls setup() needs, logins, and a summary writer. Everything here follows
// docs/api.md.
import http from 'k6/http';
import exec from 'k6/execution';

/** Base URL of the shop (or its load balancer). */
export const BASE_URL = (__ENV.BASE_URL || 'http://127.0.0.1:8080').replace(/\/+$/, '');
/** Admin token of the shop (SHOP_ADMIN_TOKEN); setup() needs it. */
export const ADMIN_TOKEN = __ENV.ADMIN_TOKEN || '';
/** A run id that keeps keys and users of two runs apart. */
export const RUN_ID = __ENV.RUN_ID || String(Date.now());

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
  return 1_000_000 + (Number(RUN_ID.replace(/\D/g, '').slice(-9)) % 1_000_000_000) * 10;
}

/**
 * JSON request parameters with optional bearer token and Idempotency-Key.
 * @param {string} token
 * @param {string} [key]
 * @param {Record<string, string>} [tags]
 * @returns {import('k6/http').RefinedParams<'text'>}
 */
export function params(token, key, tags) {
  /** @type {Record<string, string>} */
  const headers = { 'Content-Type': 'application/json' };
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
 * Creates the product of a run (admin, idempotent under the run id).
 * @param {string} name
 * @param {number} stock
 * @param {number} priceCents
 * @returns {number} the product id
 */
export function createProduct(name, stock, priceCents) {
  if (!ADMIN_TOKEN) throw new Error('ADMIN_TOKEN is required (the shop\'s SHOP_ADMIN_TOKEN)');
  const res = http.post(`${BASE_URL}/api/v1/admin/products`, JSON.stringify({ name, price_cents: priceCents, stock }),
    params(ADMIN_TOKEN, `k6-product-${RUN_ID}-${name.replace(/[^A-Za-z0-9]/g, '-')}`));
  if (res.status !== 201 && res.status !== 200) throw new Error(`create product: HTTP ${res.status} ${res.body}`);
  return body(res).id;
}

/**
 * Logs users base+first+1 .. base+first+n in (demo login), in batches of
 * 100; returns their tokens by index.
 * @param {number} base
 * @param {number} first
 * @param {number} n
 * @returns {string[]}
 */
export function tokens(base, first, n) {
  /** @type {string[]} */
  const out = [];
  for (let i = first; i < first + n; i += 100) {
    /** @type {import('k6/http').BatchRequests} */
    const reqs = [];
    for (let j = i; j < Math.min(first + n, i + 100); j++) {
      reqs.push(['POST', `${BASE_URL}/api/v1/auth/token`, JSON.stringify({ user_id: base + j + 1 }), params('', undefined, { name: 'login' })]);
    }
    for (const res of http.batch(reqs)) {
      if (res.status !== 200) throw new Error(`login: HTTP ${res.status} ${res.body}`);
      out.push(body(res).token);
    }
  }
  return out;
}

/** @type {{ vu: number, first: number, tokens: string[] }} */
let cache = { vu: 0, first: 0, tokens: [] };

/**
 * The tokens of the buyers one VU serves (users base+first+1 ..
 * base+first+n), logged in on the VU's first iteration and kept for the
 * rest. setup() hands out no tokens: k6 copies setup()'s result into every
 * VU, and thousands of tokens times hundreds of VUs is hundreds of MB.
 * @param {number} base
 * @param {number} first
 * @param {number} n
 * @returns {string[]}
 */
export function vuTokens(base, first, n) {
  const vu = exec.vu.idInTest;
  if (cache.vu !== vu || cache.first !== first || cache.tokens.length !== n) {
    cache = { vu, first, tokens: tokens(base, first, n) };
  }
  return cache.tokens;
}

/**
 * One user's token (for executors where a VU does not know its buyers in
 * advance).
 * @param {number} userId
 * @returns {string}
 */
export function token(userId) {
  const res = http.post(`${BASE_URL}/api/v1/auth/token`, JSON.stringify({ user_id: userId }), params('', undefined, { name: 'login' }));
  if (res.status !== 200) throw new Error(`login: HTTP ${res.status} ${res.body}`);
  return body(res).token;
}

/**
 * handleSummary's result: the whole summary as JSON in SUMMARY_DIR (default
 * the working directory) and one line per metric of interest on stdout.
 * @param {string} name
 * @param {any} data
 * @returns {Record<string, string>}
 */
export function summary(name, data) {
  const dir = (__ENV.SUMMARY_DIR || '.').replace(/\/+$/, '');
  /** @type {string[]} */
  const lines = [`${name}: summary written to ${dir}/${name}-summary.json`];
  for (const m of ['http_reqs', 'http_req_failed', 'checks', 'orders_created', 'sold_out', 'replays', 'payments_charged', 'http_req_duration']) {
    const metric = data.metrics && data.metrics[m];
    if (!metric) continue;
    const failed = metric.thresholds && Object.values(metric.thresholds).some((t) => !(/** @type {any} */ (t)).ok);
    lines.push(`  ${m}: ${JSON.stringify(metric.values)}${failed ? '  THRESHOLD FAILED' : ''}`);
  }
  return {
    [`${dir}/${name}-summary.json`]: JSON.stringify(data, null, 2),
    stdout: lines.join('\n') + '\n',
  };
}
