// Sends the requests of one synchronous k6 call (http.request or a batch,
// the batch in parallel) with fetch, posts the responses back on the port,
// then wakes the VU thread blocked in Atomics.wait (see http.mjs).
import { workerData } from 'node:worker_threads';

const { port, signal } = workerData;
const flag = new Int32Array(signal);

/** @param {{method: string, url: string, body: string|null, headers: Record<string,string>, timeoutMs: number}} r */
async function send(r) {
  const start = performance.now();
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), r.timeoutMs);
  try {
    const res = await fetch(r.url, {
      method: r.method,
      headers: r.headers,
      body: r.body === null || r.body === undefined ? (r.method === 'GET' || r.method === 'HEAD' ? undefined : '') : r.body,
      signal: ctl.signal,
      redirect: 'follow',
    });
    const body = await res.text();
    /** @type {[string, string][]} */
    const headers = [];
    res.headers.forEach((v, k) => headers.push([k, v]));
    return { status: res.status, body, headers, url: res.url, duration: performance.now() - start, error: '', errorCode: 0 };
  } catch (e) {
    const aborted = ctl.signal.aborted;
    return {
      status: 0, body: null, headers: [], url: r.url, duration: performance.now() - start,
      error: aborted ? `request timeout` : String(e && e.cause ? e.cause.code || e.cause : e),
      errorCode: aborted ? 1050 : 1000,
    };
  } finally {
    clearTimeout(timer);
  }
}

port.on('message', async (/** @type {any[]} */ reqs) => {
  const out = await Promise.all(reqs.map(send));
  port.postMessage(out);
  Atomics.store(flag, 0, 1);
  Atomics.notify(flag, 0);
});
