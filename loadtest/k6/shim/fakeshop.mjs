// A small in-memory shop that speaks the part of docs/api.md the k6 scripts
// use, correct by default and broken on demand, so that the scripts'
// verdicts can be proven against shops no lab strategy of the real one
// provides (broken.test.mjs). Not a model of the shop: just enough of it.
//
//   const shop = await fakeShop('undersell');   // shop.url, shop.close()
//
// Modes:
//   ok            the contract
//   oversell      the seckill route sells past the stock
//   duplicate     no idempotency: every seckill send and every keyed order is a new order
//   undersell     the seckill route says sold_out once half the stock is sold
//   unavailable   503 busy (Retry-After: 1) to every seckill, order and pay request
//   error         500 to every seckill, order and pay request
//   double-charge every pay is a fresh charge, whatever its key
import http from 'node:http';

const ADMIN = 'fake-admin';

/**
 * @param {string} mode
 * @returns {Promise<{url: string, close: () => Promise<void>}>}
 */
export function fakeShop(mode = 'ok') {
  /** @type {Map<number, {price: number, stock: number, added: number, sold: number, returned: number}>} */
  const products = new Map();
  /** @type {Map<string, any>} order_no -> order */
  const orders = new Map();
  /** @type {Map<string, string>} user:product -> order_no (seckill) */
  const seckill = new Map();
  /** @type {Map<string, {fp: string, status?: number, body?: any, headers?: Record<string,string>}>} user:route:key -> record */
  const keys = new Map();
  /** @type {Map<number, number>} user -> balance */
  const wallets = new Map();
  let lastProduct = 0, lastOrder = 0;

  const problem = (status, code) => ({ status, body: { type: `urn:shop:problem:${code}`, title: code, status, code }, headers: { 'Content-Type': 'application/problem+json' } });
  const ok = (status, body, headers = {}) => ({ status, body, headers });
  const sleep = (n) => new Promise((r) => setTimeout(r, n));

  /**
   * Runs fn once per key: a concurrent send is 409 in use, a later one the
   * same answer (Idempotent-Replayed), another body 422.
   */
  async function idempotent(user, route, key, fp, fn) {
    if (!key) return fn();
    const k = `${user}:${route}:${key}`;
    const rec = keys.get(k);
    if (rec) {
      if (rec.fp !== fp) return problem(422, 'idempotency_key_reused');
      if (rec.status === undefined) return problem(409, 'idempotency_key_in_use');
      return { status: rec.status, body: rec.body, headers: { ...rec.headers, 'Idempotent-Replayed': 'true' } };
    }
    const mine = { fp };
    keys.set(k, mine);
    const r = await fn();
    if (r.status >= 500) keys.delete(k);
    else Object.assign(mine, r);
    return r;
  }

  const newOrder = (user, product, quantity) => {
    const no = `F${String(++lastOrder).padStart(10, '0')}`;
    const o = { order_no: no, user_id: user, product_id: product, quantity, status: 'unpaid', amount_cents: products.get(product).price * quantity };
    orders.set(no, o);
    return o;
  };
  const created = (o) => ok(201, o, { Location: `/api/v1/orders/${o.order_no}` });

  async function handle(method, path, user, key, body) {
    let m;
    if (method === 'POST' && path === '/api/v1/auth/token') return ok(200, { token: `u${body.user_id}`, user_id: body.user_id });
    if (method === 'POST' && path === '/api/v1/admin/products') {
      return idempotent('admin', path, key, JSON.stringify(body), async () => {
        const id = ++lastProduct;
        products.set(id, { price: body.price_cents, stock: body.stock, added: body.stock, sold: 0, returned: 0 });
        return ok(201, { id, name: body.name, price_cents: body.price_cents, stock: body.stock });
      });
    }
    if (method === 'POST' && (m = /^\/api\/v1\/admin\/wallets\/(\d+)\/credit$/.exec(path))) {
      const u = Number(m[1]);
      return idempotent('admin', path, key, JSON.stringify(body), async () => {
        wallets.set(u, (wallets.get(u) || 0) + body.amount_cents);
        return ok(200, { user_id: u, balance_cents: wallets.get(u) });
      });
    }
    if (method === 'GET' && path === '/api/v1/admin/audit') {
      const violations = [];
      const rows = [];
      for (const [id, p] of products) {
        rows.push({ product_id: id, added: p.added, sold: p.sold, returned: p.returned, stock: p.stock });
        if (p.sold - p.returned > p.added) violations.push({ invariant: 'I2', product_id: id, detail: `sold ${p.sold} of ${p.added}` });
      }
      return ok(200, { ok: violations.length === 0, violations, products: rows });
    }
    if (user === 0) return problem(401, 'unauthenticated');
    const broken = () => (mode === 'unavailable' ? { ...problem(503, 'busy'), headers: { 'Retry-After': '1' } } : mode === 'error' ? problem(500, 'internal') : null);
    if (method === 'POST' && (m = /^\/api\/v1\/seckill\/(\d+)\/orders$/.exec(path))) {
      const b = broken();
      if (b) return b;
      const id = Number(m[1]);
      const p = products.get(id);
      if (!p) return problem(404, 'not_found');
      await sleep(2);
      const had = seckill.get(`${user}:${id}`);
      if (had && mode !== 'duplicate') return ok(200, orders.get(had), { Location: `/api/v1/orders/${had}`, 'Idempotent-Replayed': 'true' });
      const soldOut = mode === 'oversell' ? false : mode === 'undersell' ? p.sold * 2 >= p.added : p.stock < 1;
      if (soldOut) return problem(409, 'sold_out');
      p.stock--;
      p.sold++;
      const o = newOrder(user, id, 1);
      seckill.set(`${user}:${id}`, o.order_no);
      return created(o);
    }
    if (method === 'POST' && path === '/api/v1/orders') {
      const b = broken();
      if (b) return b;
      const fp = `${body.product_id}:${body.quantity}`;
      return idempotent(user, path, mode === 'duplicate' ? '' : key, fp, async () => {
        await sleep(20);
        const p = products.get(body.product_id);
        if (!p) return problem(404, 'not_found');
        if (p.stock < body.quantity) return problem(409, 'insufficient_stock');
        p.stock -= body.quantity;
        p.sold += body.quantity;
        return created(newOrder(user, body.product_id, body.quantity));
      });
    }
    if (method === 'POST' && (m = /^\/api\/v1\/orders\/([A-Z0-9]+)\/pay$/.exec(path))) {
      const b = broken();
      if (b) return b;
      const o = orders.get(m[1]);
      if (!o || o.user_id !== user) return problem(404, 'not_found');
      return idempotent(user, path, mode === 'double-charge' ? '' : key, '', async () => {
        await sleep(10);
        if (o.status === 'paid' && mode !== 'double-charge') return problem(409, 'already_paid');
        const bal = wallets.get(user) || 0;
        if (bal < o.amount_cents) return problem(409, 'insufficient_funds');
        wallets.set(user, bal - o.amount_cents);
        o.status = 'paid';
        return ok(200, { ...o });
      });
    }
    if (method === 'POST' && (m = /^\/api\/v1\/orders\/([A-Z0-9]+)\/cancel$/.exec(path))) {
      const o = orders.get(m[1]);
      if (!o || o.user_id !== user) return problem(404, 'not_found');
      if (o.status === 'unpaid') {
        o.status = 'cancelled';
        const p = products.get(o.product_id);
        p.stock += o.quantity;
        p.returned += o.quantity;
      }
      return ok(200, { ...o });
    }
    if (method === 'GET' && path === '/api/v1/wallet') return ok(200, { user_id: user, balance_cents: wallets.get(user) || 0 });
    return problem(404, 'not_found');
  }

  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', async () => {
      let body = {};
      try {
        body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString('utf8')) : {};
      } catch (_) { /* an empty or bad body: {} */ }
      const auth = /^Bearer (.*)$/.exec(req.headers.authorization || '');
      const tok = auth ? auth[1] : '';
      const user = /^u\d+$/.test(tok) ? Number(tok.slice(1)) : 0;
      const path = new URL(req.url || '/', 'http://x').pathname;
      if (path.startsWith('/api/v1/admin/') && tok !== ADMIN) {
        res.writeHead(401).end();
        return;
      }
      const key = /** @type {string} */ (req.headers['idempotency-key'] || '');
      const r = await handle(req.method, path, user, key, body);
      res.writeHead(r.status, { 'Content-Type': 'application/json', ...r.headers });
      res.end(JSON.stringify(r.body));
    });
  });
  return new Promise((done) => server.listen(0, '127.0.0.1', () => {
    const url = `http://127.0.0.1:${/** @type {any} */ (server.address()).port}`;
    done({ url, admin: ADMIN, close: () => new Promise((r) => { server.closeAllConnections(); server.close(() => r(undefined)); }) });
  }));
}
