// One VU: its own JS context (node:vm) in which the script's init code runs
// once, as k6 runs it once per VU, with its own instances of the k6 modules
// (k6, k6/http, k6/metrics, k6/execution). Its functions are made suspendable
// by transform.mjs, so its HTTP calls and sleeps wait without blocking the
// other VUs of the thread.
import { readFileSync } from 'node:fs';
import nodeHttp from 'node:http';
import nodeHttps from 'node:https';
import { dirname, resolve } from 'node:path';
import vm from 'node:vm';
import { add, metric } from './metrics.mjs';
import { transform } from './transform.mjs';

// --- suspension: the helpers transformed code calls ----------------------

/** The suspendable (generator) form of the k6 functions that wait. */
const suspending = new WeakMap();
/** The function __k6c is about to call, so that it hands back its generator. */
let pending = null;
class Deferred { constructor(g) { this.g = g; } }

/** Runs a generator that must not wait (called from code that cannot). */
function straight(g) {
  const r = g.next();
  if (!r.done) {
    g.return(undefined);
    throw new Error('k6 runner: an HTTP call or sleep() ran inside a callback that the runner cannot suspend (e.g. one given to Array.prototype.map); call it from a plain function of the script');
  }
  return r.value;
}

const helpers = {
  /** The body of a rewritten function declaration. */
  __k6x(self, t, args, gf) {
    if (pending === self) {
      pending = null;
      return new Deferred(gf.apply(t, args));
    }
    return straight(gf.apply(t, args));
  },
  /** A rewritten function expression or arrow. */
  __k6w(gf) {
    const p = function () { return helpers.__k6x(p, this, arguments, gf); };
    return p;
  },
  /** A call from rewritten code. */
  * __k6c(f, t, args) {
    if (typeof f !== 'function') throw new TypeError(`${f} is not a function`);
    const s = suspending.get(f);
    if (s) return yield* s.apply(t, args);
    pending = f;
    let r;
    try {
      r = f.apply(t, args);
    } finally {
      pending = null;
    }
    if (r instanceof Deferred) return yield* r.g;
    return r;
  },
  /** A method call from rewritten code. */
  * __k6m(obj, key, args) {
    if (obj === null || obj === undefined) throw new TypeError(`Cannot read properties of ${obj} (reading '${String(key)}')`);
    const f = obj[key];
    if (typeof f !== 'function') throw new TypeError(`${String(key)} is not a function`);
    return yield* helpers.__k6c(f, obj, args);
  },
};

/** A k6 function that waits: `gen` yields promises; called where nothing can wait, it throws. */
function waiting(name, gen) {
  const plain = function () { return straight(gen.apply(this, arguments)); };
  Object.defineProperty(plain, 'name', { value: name });
  suspending.set(plain, gen);
  return plain;
}

// --- HTTP ------------------------------------------------------------------

/** Thrown into a VU's code when the runner stops it (gracefulStop ran out, test.abort()). */
export class Interrupt extends Error {}
/** Thrown by exec.test.abort(). */
export class Abort extends Error {}

function canonical(name) {
  return name.split('-').map((w) => (w ? w[0].toUpperCase() + w.slice(1).toLowerCase() : w)).join('-');
}

/** "5ms", "60s", "2m", "1h30m", or a number of ms -> ms */
export function ms(v, def) {
  if (v === undefined || v === null || v === '') return def;
  if (typeof v === 'number') return v;
  let total = 0, seen = '';
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/g;
  let m;
  while ((m = re.exec(String(v)))) {
    total += Number(m[1]) * { ms: 1, s: 1000, m: 60000, h: 3600000 }[m[2]];
    seen += m[0];
  }
  if (!seen || seen !== String(v)) throw new Error(`${v}: not a duration`);
  return total;
}

class Response {
  constructor(req, raw) {
    // k6 lib/netext/httpext/request.go Request.Headers: map[string][]string,
    // the names canonical as Go's http.Header has them.
    /** @type {Record<string, string[]>} */
    const sent = {};
    for (const [k, v] of Object.entries(req.headers || {})) (sent[canonical(k)] ||= []).push(String(v));
    this.request = { method: req.method, url: req.url, body: req.body, headers: sent };
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

/**
 * One request; never rejects (a failed request is status 0, as in k6).
 * node:http with the VU's own keep-alive agent: each VU its own connections,
 * as each k6 VU has its own transport (and fetch costs twice the CPU here).
 * Redirects are not followed (k6 follows up to 10): the shop sends none.
 */
/** Requests in flight now and at most, over all VUs (the runner reports the most). */
export const flight = { now: 0, most: 0 };

function send(r, signal, agents) {
  const start = performance.now();
  flight.now++;
  flight.most = Math.max(flight.most, flight.now);
  const u = new URL(r.url);
  const tls = u.protocol === 'https:';
  const body = r.body === null ? (r.method === 'GET' || r.method === 'HEAD' ? undefined : '') : String(r.body);
  /** @type {Record<string, string>} */
  const headers = { ...r.headers };
  if (body !== undefined) headers['Content-Length'] = String(Buffer.byteLength(body));
  return new Promise((done) => {
    let timedOut = false, settled = false;
    const finish = (v) => {
      if (settled) return;
      settled = true;
      flight.now--;
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      done({ ...v, url: r.url, duration: performance.now() - start });
    };
    const fail = (e) => finish({
      // k6's error codes (lib/netext/httpext/error_codes.go): 1050 request timeout, 1000 generic.
      status: 0, body: null, headers: [], error: timedOut ? 'request timeout' : String(e && e.code ? e.code : e), errorCode: timedOut ? 1050 : 1000,
    });
    const req = (tls ? nodeHttps : nodeHttp).request(u, { method: r.method, headers, agent: tls ? agents.https : agents.http }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('error', fail);
      res.on('end', () => {
        /** @type {[string, string][]} */
        const hs = [];
        for (const [k, v] of Object.entries(res.headers)) hs.push([k, Array.isArray(v) ? v.join(', ') : String(v)]);
        finish({ status: res.statusCode || 0, body: Buffer.concat(chunks).toString('utf8'), headers: hs, error: '', errorCode: 0 });
      });
    });
    const onAbort = () => req.destroy(new Error('interrupted'));
    signal.addEventListener('abort', onAbort);
    const timer = setTimeout(() => { timedOut = true; req.destroy(new Error('timeout')); }, r.timeoutMs);
    req.on('error', fail);
    req.end(body);
  });
}

/**
 * Sends a batch as k6 does: at most `batch` requests at once, and at most
 * `batchPerHost` to one host (k6 options, defaults 20 and 6: lib/options.go).
 */
async function sendBatch(reqs, limits, signal, agents) {
  const out = new Array(reqs.length);
  const perHost = new Map();
  let running = 0, next = 0;
  return new Promise((done) => {
    const pump = () => {
      if (next >= reqs.length && running === 0) return done(out);
      for (let i = next; i < reqs.length && running < limits.batch; i++) {
        if (out[i] !== undefined || reqs[i].started) continue;
        const host = new URL(reqs[i].url).host;
        if ((perHost.get(host) || 0) >= limits.batchPerHost) continue;
        reqs[i].started = true;
        running++;
        perHost.set(host, (perHost.get(host) || 0) + 1);
        send(reqs[i], signal, agents).then((raw) => {
          out[i] = raw;
          running--;
          perHost.set(host, perHost.get(host) - 1);
          pump();
        });
      }
      while (next < reqs.length && reqs[next].started) next++;
    };
    pump();
  });
}

// --- the VU ----------------------------------------------------------------

const sources = new Map();
function source(file) {
  let s = sources.get(file);
  if (s === undefined) {
    s = transform(readFileSync(file, 'utf8'));
    sources.set(file, s);
  }
  return s;
}

export class VU {
  /**
   * @param {number} id VU id (0: the one that runs setup, teardown and handleSummary)
   * @param {string} script path
   * @param {Record<string,string>} env
   * @param {any} run the runner: options, counters, abort(), logger
   */
  constructor(id, script, env, run) {
    this.id = id;
    this.script = resolve(script);
    this.run = run;
    this.iterations = 0; // in this VU
    /** @type {{name: string, executor: string, startTime: number, iterationInTest: number, iterationInScenario: number}|null} */
    this.scenario = null;
    /** @type {Record<string, string>} the tags of the scenario running on this VU */
    this.scenarioTags = {};
    this.group = '';
    this.phase = ''; // 'setup' | 'teardown' while those run
    this.responseCallback = undefined;
    this.ctl = new AbortController();
    this.agents = { http: new nodeHttp.Agent({ keepAlive: true }), https: new nodeHttps.Agent({ keepAlive: true }) };
    this.context = vm.createContext({ __ENV: { ...env }, __VU: id, __ITER: 0, console: this.console(), ...helpers });
    /** @type {Map<string, vm.Module>} */
    this.modules = new Map();
  }

  console() {
    const log = (level) => (...a) => process.stderr.write(`${level}[runner] ${a.map((x) => (typeof x === 'string' ? x : JSON.stringify(x))).join(' ')}  source=console vu=${this.id}\n`);
    return { log: log('INFO'), info: log('INFO'), warn: log('WARN'), error: log('ERRO'), debug: () => {} };
  }

  /** Runs the init code; returns the module's exports. */
  async init() {
    const main = this.load(this.script);
    await main.link((spec, ref) => this.resolve(spec, ref));
    await main.evaluate();
    this.exports = /** @type {any} */ (main.namespace);
    return this.exports;
  }

  load(file) {
    let m = this.modules.get(file);
    if (!m) {
      m = new vm.SourceTextModule(source(file), { identifier: file, context: this.context });
      this.modules.set(file, m);
    }
    return m;
  }

  resolve(spec, ref) {
    const k6 = this.k6modules();
    if (Object.prototype.hasOwnProperty.call(k6, spec)) {
      let m = this.modules.get(spec);
      if (!m) {
        const exp = k6[spec];
        const names = [...Object.keys(exp), 'default'];
        m = new vm.SyntheticModule(names, function () {
          for (const n of Object.keys(exp)) this.setExport(n, exp[n]);
          this.setExport('default', exp);
        }, { identifier: spec, context: this.context });
        this.modules.set(spec, m);
      }
      return m;
    }
    if (spec.startsWith('k6/') || spec === 'k6') throw new Error(`k6 runner: module ${spec} is not implemented (only ${Object.keys(k6).join(', ')})`);
    if (!spec.startsWith('.') && !spec.startsWith('/')) throw new Error(`k6 runner: cannot import ${spec} (local files and k6 modules only)`);
    return this.load(resolve(dirname(ref.identifier), spec));
  }

  /** Tags every sample of this VU carries. */
  tags(extra) {
    /** @type {Record<string,string>} */
    const t = { ...this.run.tags, ...(this.scenario ? this.scenarioTags || {} : {}) };
    if (this.scenario) t.scenario = this.scenario.name;
    if (this.group) t.group = this.group;
    return { ...t, ...(extra || {}) };
  }

  k6modules() {
    if (this._k6) return this._k6;
    const vu = this;
    const run = this.run;

    const sleep = waiting('sleep', function* (s) {
      const wait = Math.max(0, Number(s) * 1000);
      const signal = vu.ctl.signal;
      yield new Promise((done, fail) => {
        const stop = () => { clearTimeout(t); fail(new Interrupt('interrupted')); };
        const t = setTimeout(() => { signal.removeEventListener('abort', stop); done(undefined); }, wait);
        signal.addEventListener('abort', stop, { once: true });
      });
    });
    const check = waiting('check', function* (val, sets, tags) {
      let all = true;
      for (const [name, fn] of Object.entries(sets)) {
        // A check that throws is recorded as failed, then the exception goes
        // on out of check(): the iteration ends there (k6 js/modules/k6/k6.go Check).
        let ok = false, thrown = null;
        try {
          ok = typeof fn === 'function' ? !!(yield* helpers.__k6c(fn, undefined, [val])) : !!fn;
        } catch (e) {
          if (e instanceof Interrupt) throw e;
          thrown = { e };
        }
        add('checks', 'rate', ok ? 1 : 0, vu.tags({ ...(tags || {}), check: name }));
        run.check(vu.group, name, ok);
        if (thrown) throw thrown.e;
        all = all && ok;
      }
      return all;
    });
    const group = waiting('group', function* (name, fn) {
      const outer = vu.group;
      vu.group = `${outer}::${name}`;
      try {
        return yield* helpers.__k6c(fn, undefined, []);
      } finally {
        vu.group = outer;
      }
    });
    const fail = (msg) => { throw new Error(msg || 'fail() called'); };

    const normalise = (method, url, body, params) => {
      params = params || {};
      /** @type {Record<string,string>} */
      const headers = { 'User-Agent': 'k6-runner (node)' };
      for (const [k, v] of Object.entries(params.headers || {})) headers[k] = String(v);
      let b = body === undefined ? null : body;
      if (b !== null && typeof b === 'object') {
        b = new URLSearchParams(/** @type {any} */ (b)).toString();
        if (!Object.keys(headers).some((k) => k.toLowerCase() === 'content-type')) headers['Content-Type'] = 'application/x-www-form-urlencoded';
      }
      return {
        method: String(method).toUpperCase(), url: String(url), body: b, headers,
        timeoutMs: ms(params.timeout, 60000),
        tags: { ...(params.tags || {}) },
        callback: Object.prototype.hasOwnProperty.call(params, 'responseCallback') ? params.responseCallback : undefined,
      };
    };
    const defaultExpected = (res) => res.status >= 200 && res.status < 400;
    /** Sends and records k6's HTTP metrics. */
    function* sendAll(reqs) {
      if (!vu.phase && !vu.scenario) throw new Error('Making http requests in the init context is not supported');
      const raws = yield sendBatch(reqs, run.batchLimits, vu.ctl.signal, vu.agents);
      if (vu.ctl.signal.aborted) throw new Interrupt('interrupted');
      return raws.map((raw, i) => {
        const req = reqs[i];
        const res = new Response(req, raw);
        if (raw.error) run.log('WARN', `Request Failed error="${req.method} ${req.url}: ${raw.error}"`);
        // k6's system tags (lib/netext/httpext/request.go): name defaults to the URL.
        const tags = vu.tags({ name: req.url, url: req.url, method: req.method, status: String(res.status), ...req.tags });
        if (vu.phase) tags.group = `::${vu.phase}`;
        let cb = req.callback === undefined ? vu.responseCallback : req.callback;
        if (cb === undefined) cb = defaultExpected;
        const expected = cb === null ? null : !!cb(res);
        if (expected !== null) tags.expected_response = String(expected);
        if (raw.error) tags.error_code = String(raw.errorCode);
        add('http_reqs', 'counter', 1, tags);
        if (expected !== null) add('http_req_failed', 'rate', expected ? 0 : 1, tags);
        add('http_req_duration', 'trend', raw.duration, tags, 'time');
        return res;
      });
    }
    const request = waiting('request', function* (method, url, body, params) {
      return (yield* sendAll([normalise(method, url, body, params)]))[0];
    });
    const verb = (m, withBody) => waiting(m.toLowerCase(), withBody
      ? function* (url, body, params) { return (yield* sendAll([normalise(m, url, body, params)]))[0]; }
      : function* (url, params) { return (yield* sendAll([normalise(m, url, null, params)]))[0]; });
    const batch = waiting('batch', function* (reqs) {
      const list = Array.isArray(reqs) ? reqs : Object.values(reqs);
      const norm = list.map((r) => {
        if (typeof r === 'string') return normalise('GET', r, null, {});
        if (Array.isArray(r)) return normalise(r[0], r[1], r[2], r[3]);
        return normalise(r.method || 'GET', r.url, r.body, r.params);
      });
      const out = yield* sendAll(norm);
      if (Array.isArray(reqs)) return out;
      return Object.fromEntries(Object.keys(reqs).map((k, i) => [k, out[i]]));
    });
    const http = {
      request, batch,
      get: verb('GET', false), head: verb('HEAD', false),
      post: verb('POST', true), put: verb('PUT', true), patch: verb('PATCH', true), del: verb('DELETE', true), options: verb('OPTIONS', true),
      /** @param {...(number | {min: number, max: number})} specs */
      expectedStatuses: (...specs) => (res) => specs.some((s) => (typeof s === 'number' ? res.status === s : res.status >= s.min && res.status <= s.max)),
      setResponseCallback: (cb) => { vu.responseCallback = cb; },
    };

    class Custom {
      constructor(name, type, isTime) {
        this.name = name;
        this.type = type;
        this.contains = isTime ? 'time' : 'default';
        metric(name, type, this.contains);
      }

      add(value, tags) {
        if (!vu.phase && !vu.scenario) throw new Error('Adding to metrics in the init context is not supported');
        const v = this.type === 'rate' ? (value ? 1 : 0) : Number(value);
        add(this.name, this.type, v, vu.tags(tags), this.contains);
        return true;
      }
    }
    const metricsModule = {
      Counter: class Counter extends Custom { constructor(n) { super(n, 'counter'); } },
      Rate: class Rate extends Custom { constructor(n) { super(n, 'rate'); } },
      Trend: class Trend extends Custom { constructor(n, isTime) { super(n, 'trend', isTime); } },
      Gauge: class Gauge extends Custom { constructor(n) { super(n, 'gauge'); } },
    };

    const exec = {
      vu: {
        get idInTest() { return vu.id; },
        get idInInstance() { return vu.id; },
        get iterationInInstance() { return vu.iterations - 1; },
        get iterationInScenario() { return vu.scenario ? vu.scenario.iterationInScenario : 0; },
      },
      scenario: {
        get name() { return vu.scenario ? vu.scenario.name : ''; },
        get executor() { return vu.scenario ? vu.scenario.executor : ''; },
        get startTime() { return vu.scenario ? vu.scenario.startTime : 0; },
        get iterationInTest() { return vu.scenario ? vu.scenario.iterationInTest : 0; },
        get iterationInInstance() { return vu.scenario ? vu.scenario.iterationInTest : 0; },
      },
      instance: {
        get iterationsCompleted() { return run.completed; },
        get iterationsInterrupted() { return run.interrupted; },
        get vusActive() { return run.active; },
        get vusInitialized() { return run.initialized; },
        get currentTestRunDuration() { return run.duration(); },
      },
      test: {
        // k6 js/modules/k6/execution: abort() stops the whole test, exit code 108.
        abort(msg) { run.abort(msg, vu); throw new Abort(msg || 'test aborted'); },
        get options() { return run.options; },
      },
    };

    this._k6 = {
      k6: { check, group, sleep, fail },
      'k6/http': http,
      'k6/metrics': metricsModule,
      'k6/execution': exec,
    };
    return this._k6;
  }

  /**
   * Calls an exported function of the script as k6 does, waiting where it
   * waits. Resolves with its result; rejects with what it threw.
   */
  async call(fn, args) {
    const g = helpers.__k6c(fn, undefined, args);
    let r = g.next();
    for (;;) {
      if (r.done) return r.value;
      let v, err, ok = false;
      try {
        v = await r.value;
        ok = true;
      } catch (e) {
        err = e;
      }
      if (this.ctl.signal.aborted) {
        g.return(undefined);
        throw new Interrupt('interrupted');
      }
      r = ok ? g.next(v) : g.throw(err);
    }
  }

  /** Stops this VU's iteration at its next wait (its requests are cancelled). */
  interrupt() {
    this.ctl.abort();
  }

  /** Ready for the next iteration after an interrupt. */
  reset() {
    if (this.ctl.signal.aborted) this.ctl = new AbortController();
  }
}
