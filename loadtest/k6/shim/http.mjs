// k6/http on fetch. k6's HTTP calls are synchronous; fetch is not. Each call
// posts its requests to a worker thread and blocks this thread in
// Atomics.wait until the worker has the answers (a batch is sent in
// parallel), then reads them with receiveMessageOnPort: the script runs
// exactly as it does under k6, without being rewritten.
import { MessageChannel, Worker, receiveMessageOnPort } from 'node:worker_threads';
import { add, state } from './runtime.mjs';

const signal = new SharedArrayBuffer(4);
const flag = new Int32Array(signal);
const { port1, port2 } = new MessageChannel();
const worker = new Worker(new URL('./fetch-worker.mjs', import.meta.url), { workerData: { port: port2, signal }, transferList: [port2] });
worker.unref();
port1.unref();

/** "idempotent-replayed" -> "Idempotent-Replayed", as k6 (Go) spells header names. */
function canonical(name) {
  return name.split('-').map((w) => (w ? w[0].toUpperCase() + w.slice(1).toLowerCase() : w)).join('-');
}

/** "5ms", "60s", "2m", or a number of ms -> ms */
function duration(v, def) {
  if (v === undefined || v === null || v === '') return def;
  if (typeof v === 'number') return v;
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(String(v));
  if (!m) throw new Error(`timeout ${v}: not a duration`);
  return Number(m[1]) * { ms: 1, s: 1000, m: 60000, h: 3600000 }[m[2]];
}

function defaultExpected(res) {
  return res.status >= 200 && res.status < 400;
}

class Response {
  constructor(req, raw) {
    this.request = { method: req.method, url: req.url, body: req.body, headers: req.headers };
    this.status = raw.status;
    this.body = raw.body;
    this.url = raw.url;
    this.error = raw.error;
    this.error_code = raw.errorCode;
    /** @type {Record<string, string>} */
    this.headers = {};
    for (const [k, v] of raw.headers) {
      const c = canonical(k);
      this.headers[c] = this.headers[c] === undefined ? v : `${this.headers[c]}, ${v}`;
    }
    this.timings = { duration: raw.duration, waiting: raw.duration, sending: 0, receiving: 0, blocked: 0, connecting: 0, tls_handshaking: 0 };
  }

  json(selector) {
    const v = JSON.parse(this.body);
    if (!selector) return v;
    return selector.split('.').reduce((o, k) => (o == null ? undefined : o[k]), v);
  }
}

/** Normalises one request of k6's call forms. */
function normalise(method, url, body, params) {
  params = params || {};
  /** @type {Record<string,string>} */
  const headers = { 'User-Agent': 'k6-shim (node)' };
  for (const [k, v] of Object.entries(params.headers || {})) headers[k] = String(v);
  let b = body;
  if (b !== null && b !== undefined && typeof b === 'object') {
    // k6 form-encodes an object body.
    b = new URLSearchParams(/** @type {any} */ (b)).toString();
    if (!Object.keys(headers).some((k) => k.toLowerCase() === 'content-type')) headers['Content-Type'] = 'application/x-www-form-urlencoded';
  }
  const name = (params.tags && params.tags.name) || url;
  return {
    method: method.toUpperCase(), url: String(url), body: b === undefined ? null : b, headers,
    timeoutMs: duration(params.timeout, 60000),
    tags: { ...(params.tags || {}), name, method: method.toUpperCase() },
    callback: Object.prototype.hasOwnProperty.call(params, 'responseCallback') ? params.responseCallback : undefined,
  };
}

/** Sends requests synchronously (in parallel among themselves) and records k6's metrics. */
function sendAll(reqs) {
  Atomics.store(flag, 0, 0);
  port1.postMessage(reqs.map(({ method, url, body, headers, timeoutMs }) => ({ method, url, body, headers, timeoutMs })));
  while (Atomics.wait(flag, 0, 0, 600000) === 'timed-out') {
    throw new Error('k6 shim: no answer from the fetch worker in 10 minutes');
  }
  const msg = receiveMessageOnPort(port1);
  if (!msg) throw new Error('k6 shim: the fetch worker woke us without an answer');
  return msg.message.map((raw, i) => {
    const req = reqs[i];
    const res = new Response(req, raw);
    if (raw.error) console.warn(`WARN[shim] Request Failed error="${req.method} ${req.url}: ${raw.error}"`);
    const tags = { ...req.tags, status: String(res.status), expected_response: 'true' };
    if (state.group) tags.group = state.group;
    let cb = req.callback === undefined ? state.responseCallback : req.callback;
    if (cb === undefined) cb = defaultExpected;
    const expected = cb === null ? null : cb(res);
    if (expected !== null) tags.expected_response = String(expected);
    const phase = state.inSetup ? { setup: 'true' } : {};
    add('http_reqs', 'counter', 1, { ...tags, ...phase });
    if (expected !== null) add('http_req_failed', 'rate', expected ? 0 : 1, { ...tags, ...phase });
    add('http_req_duration', 'trend', res.timings.duration, { ...tags, ...phase });
    add('data_received', 'counter', (res.body || '').length, tags);
    add('data_sent', 'counter', typeof req.body === 'string' ? req.body.length : 0, tags);
    return res;
  });
}

function request(method, url, body, params) {
  return sendAll([normalise(method, url, body, params)])[0];
}

const http = {
  request,
  get: (url, params) => request('GET', url, null, params),
  head: (url, params) => request('HEAD', url, null, params),
  del: (url, body, params) => request('DELETE', url, body, params),
  options: (url, body, params) => request('OPTIONS', url, body, params),
  post: (url, body, params) => request('POST', url, body, params),
  put: (url, body, params) => request('PUT', url, body, params),
  patch: (url, body, params) => request('PATCH', url, body, params),
  /** @param {any[] | Record<string, any>} reqs */
  batch(reqs) {
    const list = Array.isArray(reqs) ? reqs : Object.values(reqs);
    const norm = list.map((r) => {
      if (typeof r === 'string') return normalise('GET', r, null, {});
      if (Array.isArray(r)) return normalise(r[0], r[1], r[2] === undefined ? null : r[2], r[3]);
      return normalise(r.method || 'GET', r.url, r.body === undefined ? null : r.body, r.params);
    });
    const out = sendAll(norm);
    if (Array.isArray(reqs)) return out;
    return Object.fromEntries(Object.keys(reqs).map((k, i) => [k, out[i]]));
  },
  /** @param {...(number | {min: number, max: number})} specs */
  expectedStatuses(...specs) {
    return (res) => specs.some((s) => (typeof s === 'number' ? res.status === s : res.status >= s.min && res.status <= s.max));
  },
  setResponseCallback(cb) {
    state.responseCallback = cb;
  },
};

export default http;
export const { get, post, put, patch, del, batch, expectedStatuses, setResponseCallback } = http;
export { request };
