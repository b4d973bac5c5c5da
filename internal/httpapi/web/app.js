// The demo page's behaviour: every call below is a plain fetch of the API in
// docs/api.md, so this file doubles as a worked example of a well-behaved client
// (a fresh Idempotency-Key per user action, the same key on a retry, errors
// read from problem+json).
'use strict';

const $ = (id) => document.getElementById(id);

// ---------- small helpers ----------

// h builds an element; children are nodes or text (never parsed as HTML).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

function svg(tag, attrs, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  for (const c of children) el.append(c instanceof Node ? c : String(c));
  return el;
}

const money = (cents) => (cents < 0 ? '-' : '') + '$' + (Math.abs(cents) / 100).toFixed(2);
const toCents = (s) => Math.round(parseFloat(s) * 100);
const time = (iso) => (iso ? new Date(iso).toLocaleTimeString() : '');
const short = (no) => (no.length > 14 ? no.slice(0, 6) + '…' + no.slice(-6) : no);

// newKey makes an Idempotency-Key; getRandomValues works on plain http too.
function newKey(prefix) {
  const b = new Uint8Array(12);
  crypto.getRandomValues(b);
  return prefix + '-' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

const statusText = {
  200: 'OK', 201: 'Created', 202: 'Accepted', 400: 'Bad Request', 401: 'Unauthorized', 402: 'Payment Required',
  403: 'Forbidden', 404: 'Not Found', 405: 'Method Not Allowed', 409: 'Conflict', 413: 'Content Too Large',
  422: 'Unprocessable Content', 500: 'Internal Server Error', 503: 'Service Unavailable',
};

// api calls the shop and never throws: the answer says ok, status, data (the
// JSON body), problem (the problem+json body of an error) and replayed
// (the Idempotent-Replayed header).
async function api(method, path, { token, body, key } = {}) {
  const headers = { Accept: 'application/json, application/problem+json' };
  if (token) headers.Authorization = 'Bearer ' + token;
  if (key) headers['Idempotency-Key'] = key;
  const init = { method, headers, cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  const start = performance.now();
  try {
    res = await fetch(path, init);
  } catch (e) {
    return { ok: false, status: 0, method, path, problem: { title: 'Network error', detail: 'the shop did not answer: ' + e.message } };
  }
  let data = null;
  const text = await res.text();
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  const out = { ok: res.ok, status: res.status, method, path, key, data, replayed: res.headers.get('Idempotent-Replayed') === 'true',
    elapsed: performance.now() - start, timing: serverTiming(res.headers.get('Server-Timing')) };
  if (!res.ok) {
    const isProblem = (res.headers.get('Content-Type') || '').includes('application/problem+json');
    out.problem = isProblem && data ? data : { title: statusText[res.status] || 'HTTP ' + res.status, detail: text.slice(0, 200) };
    if (res.status === 401 && token && token === state.userToken) logout('Your token is no longer valid: log in again.');
  }
  return out;
}

// show renders one answer into a result box: the status, the problem's title
// and detail (and field errors), the replay note, and a success summary.
function show(box, r, summary) {
  box.replaceChildren();
  box.className = 'result ' + (r.ok ? 'ok' : 'err');
  const line = h('div', {}, h('span', { class: 'status' }, r.status ? r.status + ' ' + (statusText[r.status] || '') : 'no answer'), ' ');
  if (r.ok) line.append(...[summary || 'done'].flat(Infinity));
  else line.append(h('span', { class: 'title' }, r.problem.title || 'Error'));
  box.append(line);
  if (!r.ok) {
    // A detail that only repeats the title ("Sold out" / "sold out") is left out.
    const d = r.problem.detail || '';
    if (d && d.toLowerCase() !== String(r.problem.title || '').toLowerCase()) box.append(h('div', { class: 'detail' }, d));
    if (r.problem.errors) {
      box.append(h('ul', { class: 'fields' }, Object.entries(r.problem.errors).map(([f, m]) => h('li', {}, h('code', {}, f), ' ', m))));
    }
    if (r.problem.code) box.append(h('div', { class: 'route' }, 'code ', h('code', {}, r.problem.code)));
  }
  if (r.replayed) {
    box.append(h('div', { class: 'replay', 'data-testid': 'replay' },
      'Idempotent replay (Idempotent-Replayed: true): the shop answered from its stored result; nothing was done twice.'));
  }
  box.append(h('div', { class: 'route' }, r.method + ' ' + r.path + (r.key ? '  ·  Idempotency-Key ' + r.key : '')));
}

function showKey(el, key, what) {
  el.replaceChildren();
  if (key) el.append('Last ' + what + ' used Idempotency-Key ', h('code', {}, key));
}

// ---------- state ----------

const state = {
  userToken: sessionStorage.getItem('shop.userToken') || '',
  userId: Number(sessionStorage.getItem('shop.userId')) || 0,
  adminToken: sessionStorage.getItem('shop.adminToken') || '',
  products: [],
  showLab: false, // show lab race products in the shopper's list
  balance: null, // the wallet's cents, once read
  orders: [],
  adminOK: false, // the admin token was accepted
  strategies: [], // GET /admin/lab/info race_strategies
  lastOrder: null, // { key, body } of the last regular order
  lastRestock: null,
  lastCredit: null,
  race: null, // race id being followed
};

// ---------- tabs ----------

function route() {
  const view = location.hash === '#operator' ? 'operator' : 'shopper';
  for (const v of ['shopper', 'operator']) {
    $('view-' + v).hidden = v !== view;
    $('tab-' + v).setAttribute('aria-selected', String(v === view));
  }
  renderWho();
}

// ---------- shopper: login ----------

// renderWho says who the page acts as in the view shown: the shopper's
// user, or whether the operator's admin token was accepted.
function renderWho() {
  const who = $('who');
  who.replaceChildren();
  if (location.hash === '#operator') {
    if (state.adminOK) who.append('operator · ', h('b', { class: 'ok' }, 'admin token accepted ✓'));
    else who.append('operator · no admin token yet');
  } else if (state.userToken) who.append('shopping as ', h('b', {}, 'user ' + state.userId));
  else who.append('not logged in');
  $('logout-btn').hidden = !state.userToken;
  $('login-btn').textContent = state.userToken ? 'Switch user' : 'Log in';
}

async function login(ev) {
  ev.preventDefault();
  const id = Number($('login-user').value);
  const r = await api('POST', '/api/v1/auth/token', { body: { user_id: id } });
  show($('login-result'), r, r.ok && ['logged in as user ', h('b', {}, r.data.user_id), ', token valid until ' + new Date(r.data.expires_at).toLocaleString()]);
  if (!r.ok) return;
  state.userToken = r.data.token;
  state.userId = r.data.user_id;
  state.balance = null;
  sessionStorage.setItem('shop.userToken', state.userToken);
  sessionStorage.setItem('shop.userId', String(state.userId));
  renderWho();
  refreshUser();
}

function logout(why) {
  state.userToken = '';
  state.userId = 0;
  sessionStorage.removeItem('shop.userToken');
  sessionStorage.removeItem('shop.userId');
  state.balance = null;
  renderWho();
  renderOrders([]);
  $('wallet-balance').textContent = '–';
  if (typeof why === 'string') {
    const box = $('login-result');
    box.className = 'result err';
    box.replaceChildren(why);
  }
}

function needLogin(box) {
  if (state.userToken) return false;
  box.className = 'result err';
  box.replaceChildren(h('span', { class: 'title' }, 'Log in first'), h('div', { class: 'detail' }, 'Pick a user id in Demo login.'));
  return true;
}

// ---------- products (live) ----------

let productsFailing = false;

async function pollProducts() {
  const r = await api('GET', '/api/v1/products?limit=200');
  const live = $('products-live');
  if (!r.ok) {
    live.classList.add('stale');
    live.textContent = 'offline';
    productsFailing = true;
    return;
  }
  productsFailing = false;
  live.classList.remove('stale');
  live.textContent = 'live';
  live.title = 'updated ' + new Date().toLocaleTimeString();
  state.products = r.data.items;
  renderProducts();
}

// Lab race products (labrace.ProductPrefix) are bought by simulated
// buyers; the shopper's list leaves them out unless asked to show them.
const LAB_PREFIX = 'Lab race ';
const isLab = (p) => p.name.startsWith(LAB_PREFIX);
const shopperProducts = () => state.products.filter((p) => state.showLab || !isLab(p));

function renderProducts() {
  const body = $('products-table').tBodies[0];
  const seen = new Set();
  const shown = shopperProducts();
  const labN = state.products.length - state.products.filter((p) => !isLab(p)).length;
  $('lab-toggle').hidden = labN === 0;
  $('lab-count').textContent = `show ${labN} lab race product${labN === 1 ? '' : 's'} (hidden: simulated buyers bought them)`;
  for (const p of shown) {
    seen.add(String(p.id));
    let tr = body.querySelector(`tr[data-id="${p.id}"]`);
    if (!tr) {
      tr = h('tr', { 'data-id': p.id },
        h('td', { class: 'mono opt' }, p.id),
        h('td', {}, h('span', { class: 'name' }, p.name),
          p.flash_sale ? [' ', h('span', { class: 'badge sale', 'data-testid': 'sale-' + p.id }, '⚡ Flash sale')] : []),
        h('td', { class: 'num' }, money(p.price_cents)),
        h('td', { class: 'num' }, h('span', { class: 'stock' })),
        // Buy now (a seckill order) only on a flash sale; another product
        // is ordered in the Regular order form, which its button selects.
        h('td', { class: 'actions' }, p.flash_sale
          ? h('button', { class: 'primary small buy', onclick: () => buy(p.id), 'data-testid': 'buy-' + p.id }, 'Buy now ⚡')
          : h('button', { class: 'small order', onclick: () => pickForOrder(p.id), 'data-testid': 'order-' + p.id }, 'Order…')));
      body.append(tr);
    }
    const s = tr.querySelector('.stock');
    if (s.textContent !== String(p.stock)) {
      if (s.textContent !== '') {
        s.parentElement.classList.remove('flash');
        void s.parentElement.offsetWidth; // restart the animation
        s.parentElement.classList.add('flash');
      }
      s.textContent = p.stock;
    }
    s.classList.toggle('zero', p.stock <= 0);
    tr.querySelector('.name').textContent = p.name;
    // A sold-out row has no active button: the stock cell already says 0.
    const b = tr.querySelector('button.buy, button.order');
    b.disabled = p.stock <= 0;
    b.textContent = p.stock <= 0 ? 'Sold out' : p.flash_sale ? 'Buy now ⚡' : 'Order…';
  }
  for (const tr of [...body.rows]) if (!seen.has(tr.dataset.id)) tr.remove();
  $('products-empty').hidden = shown.length > 0;
  fillProductSelect($('order-product'), shown.filter((p) => !p.flash_sale));
  fillProductSelect($('restock-product'), state.products);
}

function fillProductSelect(sel, products) {
  const want = products.map((p) => String(p.id));
  const have = [...sel.options].map((o) => o.value);
  if (want.join(',') === have.join(',')) {
    for (const o of sel.options) {
      const p = products.find((x) => String(x.id) === o.value);
      if (p) o.textContent = `#${p.id} ${p.name} (${p.stock} left)`;
    }
    return;
  }
  const keep = sel.value;
  sel.replaceChildren();
  for (const p of products) sel.append(h('option', { value: p.id }, `#${p.id} ${p.name} (${p.stock} left)`));
  if (want.includes(keep)) sel.value = keep;
  else if (products.length) sel.value = String(products[products.length - 1].id);
}

// ---------- shopper: buy, order, pay, cancel ----------

// pickForOrder selects a regular product in the Regular order form and
// brings the form into view.
function pickForOrder(productId) {
  $('order-product').value = String(productId);
  $('card-order').scrollIntoView({ block: 'nearest' });
  $('order-qty').focus({ preventScroll: true });
}

// toast repeats a purchase's result where the buyer is looking: a box
// fixed at the foot of the window, whatever the scroll, until the next
// result or a click on it.
let toastTimer;
function toast(box) {
  const t = $('toast');
  t.replaceChildren(...[...box.childNodes].map((n) => n.cloneNode(true)));
  t.className = box.className + ' toast';
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.hidden = true; }, 8000);
}

// serverTiming reads a Server-Timing header (the shop's order answers name
// their phases: ratelimit, queue, lock, tx) into [{name, desc, ms}].
function serverTiming(header) {
  if (!header) return [];
  return header.split(',').map((metric) => {
    const [name, ...params] = metric.split(';').map((s) => s.trim());
    const t = { name, desc: name, ms: 0 };
    for (const p of params) {
      const [k, v = ''] = p.split('=');
      if (k === 'dur') t.ms = parseFloat(v) || 0;
      if (k === 'desc') t.desc = v.replace(/^"|"$/g, '');
    }
    return t;
  }).filter((t) => /^[a-z]+$/.test(t.name));
}

// drawTimeline draws where a purchase's milliseconds went: its answer's
// Server-Timing phases in the order they happen, then the rest of the time
// the page waited (the network, the shop's own work). Contended, the queue
// and the lock wait grow; alone, the transaction is most of it.
function drawTimeline(el, r) {
  if (!r.timing || r.timing.length === 0) {
    el.hidden = true;
    el.replaceChildren();
    return;
  }
  const phases = [...r.timing];
  const sum = phases.reduce((a, t) => a + t.ms, 0);
  const total = Math.max(r.elapsed || 0, sum);
  phases.push({ name: 'rest', desc: 'network and the rest', ms: total - sum });
  let x = 0;
  const bar = svg('svg', { class: 'tl-bar', viewBox: '0 0 1000 20', preserveAspectRatio: 'none', role: 'img',
    'aria-label': phases.map((t) => `${t.desc} ${t.ms.toFixed(1)} ms`).join(', ') });
  for (const t of phases) {
    const w = total > 0 ? (t.ms / total) * 1000 : 0;
    bar.append(svg('rect', { class: 'tl-' + t.name, x: x.toFixed(1), y: 0, width: Math.max(w, 0).toFixed(1), height: 20 },
      svg('title', {}, `${t.desc}: ${t.ms.toFixed(2)} ms`)));
    x += w;
  }
  el.replaceChildren(
    h('div', { class: 'tl-title' }, `Where its ${total.toFixed(1)} ms went (Server-Timing)`),
    bar,
    h('ul', { class: 'tl-legend' }, phases.map((t) => h('li', { 'data-phase': t.name },
      h('i', { class: 'tl-' + t.name }), `${t.desc} `, h('b', {}, `${t.ms.toFixed(1)} ms`)))));
  el.hidden = false;
}

async function buy(productId) {
  const box = $('buy-result');
  if (needLogin(box)) return;
  const r = await api('POST', `/api/v1/seckill/${productId}/orders`, { token: state.userToken });
  drawTimeline($('buy-timeline'), r);
  const o = r.data;
  show(box, r, r.ok && [r.status === 201 ? 'order ' : 'your existing order ', h('code', {}, short(o.order_no)), ` for product #${o.product_id}, ${money(o.amount_cents)}: pay it in My orders`]);
  toast(box);
  pollProducts();
  await refreshOrders();
  if (r.ok) showOrder(o.order_no);
}

// showOrder marks the order a purchase just made in My orders and, when the
// row is off screen (a phone, where My orders is two screens further
// down), scrolls to it so the buyer sees it and its Pay button.
function showOrder(no) {
  const row = $('orders-table').querySelector(`tr[data-order="${CSS.escape(no)}"]`);
  if (!row) return;
  state.justMade = no;
  for (const old of $('orders-table').querySelectorAll('tr.just-made')) old.classList.remove('just-made');
  row.classList.add('just-made');
  const box = row.getBoundingClientRect();
  if (box.top < 0 || box.bottom > window.innerHeight) row.scrollIntoView({ block: 'center' });
}

async function placeOrder(ev) {
  ev.preventDefault();
  const box = $('order-result');
  if (needLogin(box)) return;
  state.lastOrder = {
    key: newKey('order'),
    body: { product_id: Number($('order-product').value), quantity: Number($('order-qty').value) },
  };
  $('order-retry').disabled = false;
  await sendOrder();
}

async function sendOrder() {
  const box = $('order-result');
  if (needLogin(box) || !state.lastOrder) return;
  const { key, body } = state.lastOrder;
  showKey($('order-key'), key, 'order');
  const r = await api('POST', '/api/v1/orders', { token: state.userToken, key, body });
  drawTimeline($('order-timeline'), r);
  const o = r.data;
  show(box, r, r.ok && ['order ', h('code', {}, short(o.order_no)), `: ${o.quantity} × product #${o.product_id}, ${money(o.amount_cents)}`]);
  toast(box);
  pollProducts();
  await refreshOrders();
  if (r.ok) showOrder(o.order_no);
}

async function pay(no) {
  const box = $('orders-result');
  const key = newKey('pay');
  const r = await api('POST', `/api/v1/orders/${encodeURIComponent(no)}/pay`, { token: state.userToken, key });
  show(box, r, r.ok && ['paid order ', h('code', {}, short(no)), ' (' + money(r.data.amount_cents) + ')']);
  refreshUser();
}

async function cancel(no) {
  const box = $('orders-result');
  const r = await api('POST', `/api/v1/orders/${encodeURIComponent(no)}/cancel`, { token: state.userToken });
  show(box, r, r.ok && ['cancelled order ', h('code', {}, short(no)), ': its stock went back on sale']);
  pollProducts();
  refreshOrders();
}

async function refreshOrders() {
  if (!state.userToken) return;
  const r = await api('GET', '/api/v1/orders?limit=50', { token: state.userToken });
  if (!r.ok) return show($('orders-result'), r);
  renderOrders(r.data.items);
}

// renderOrders lists the orders; Pay is off while the wallet (once read)
// holds less than the order costs, so a $0.00 wallet never offers it.
function renderOrders(items) {
  state.orders = items;
  const body = $('orders-table').tBodies[0];
  const short$ = (o) => state.balance !== null && state.balance < o.amount_cents;
  // The wallet note names the numbers: the balance, the cheapest pending
  // order it cannot pay, and what to do (not "empty" when it is not).
  const unpaid = items.filter((o) => o.status === 'pending' && short$(o)).sort((a, b) => a.amount_cents - b.amount_cents);
  const note = $('wallet-empty');
  note.hidden = unpaid.length === 0;
  if (unpaid.length) {
    const o = unpaid[0];
    note.replaceChildren(
      state.balance === 0 ? 'Your wallet is empty' : `Your balance ${money(state.balance)} is less than ${money(o.amount_cents)}`,
      ` (order ${short(o.order_no)})`, ': ', h('b', {}, 'Pay'), ' stays off until an operator credits at least ',
      h('b', {}, money(o.amount_cents - state.balance)), ' more (Operator → Credit a wallet), or cancel the order.');
  }
  body.replaceChildren(...items.map((o) => h('tr', { 'data-order': o.order_no, 'data-status': o.status, class: o.order_no === state.justMade ? 'just-made' : undefined },
    h('td', { title: o.order_no + ' · ' + new Date(o.created_at).toLocaleString() }, h('span', { class: 'mono' }, short(o.order_no)),
      h('div', { class: 'sub' }, 'product #' + o.product_id + ' · ' + time(o.created_at))),
    h('td', { class: 'opt' }, h('span', { class: 'badge ' + o.kind }, o.kind)),
    h('td', { class: 'num opt' }, o.quantity),
    h('td', { class: 'num' }, money(o.amount_cents)),
    h('td', {}, h('span', { class: 'badge ' + o.status }, o.status)),
    h('td', { class: 'actions' }, o.status === 'pending' ? [
      h('button', {
        class: 'primary small', onclick: () => pay(o.order_no), disabled: short$(o),
        title: short$(o) ? `balance ${money(state.balance)} is less than ${money(o.amount_cents)}: an operator must credit ${money(o.amount_cents - state.balance)} more first` : undefined,
      }, 'Pay'),
      h('button', { class: 'small', onclick: () => cancel(o.order_no) }, 'Cancel'),
    ] : []))));
  $('orders-empty').hidden = items.length > 0;
}

async function refreshWallet() {
  if (!state.userToken) return;
  const r = await api('GET', '/api/v1/wallet', { token: state.userToken });
  if (!r.ok) return show($('wallet-result'), r);
  $('wallet-result').replaceChildren();
  $('wallet-balance').textContent = money(r.data.balance_cents);
  if (state.balance !== r.data.balance_cents) {
    state.balance = r.data.balance_cents;
    renderOrders(state.orders);
  }
}

function refreshUser() {
  refreshOrders();
  refreshWallet();
}

// ---------- operator ----------

async function useAdmin(ev) {
  ev.preventDefault();
  state.adminToken = $('admin-token').value.trim();
  sessionStorage.setItem('shop.adminToken', state.adminToken);
  await labInfo(true);
}

function needAdmin(box) {
  if (state.adminToken) return false;
  box.className = 'result err';
  box.replaceChildren(h('span', { class: 'title' }, 'Admin token needed'), h('div', { class: 'detail' }, 'Paste it in Admin token first.'));
  return true;
}

// labInfo checks the token, shows the stock strategy in use and offers the
// strategies a side-by-side race can put against the safe one.
async function labInfo(report) {
  if (!state.adminToken) return;
  const r = await api('GET', '/api/v1/admin/lab/info', { token: state.adminToken });
  const box = $('admin-result');
  const st = $('strategy');
  if (r.status === 404) { // lab routes off: check the token on the audit route instead
    const a = await api('GET', '/api/v1/admin/audit', { token: state.adminToken });
    show(box, a, 'admin token accepted');
    setAdminOK(a.ok);
    st.className = 'strategy';
    st.textContent = a.ok ? 'Lab routes are off on this instance (SHOP_LAB_ROUTES=false): no flash sale race here.' : '';
    $('race-btn').disabled = true;
    return;
  }
  if (report || !r.ok) show(box, r, 'admin token accepted');
  setAdminOK(r.ok);
  if (!r.ok) { st.textContent = ''; return; }
  const i = r.data;
  st.className = 'strategy ' + (i.safe ? 'safe' : 'unsafe');
  st.replaceChildren('Stock strategy: ', h('code', { 'data-testid': 'strategy' }, i.stock_strategy),
    i.safe ? ' — safe (lock + fencing token)' : ' — UNSAFE lab mode: ' + i.lab_switches.join(', '));
  $('race-buyers').max = i.max_buyers;
  $('race-conc').max = i.max_concurrency;
  state.strategies = i.race_strategies || [];
  fillStrategies();
  if (i.running_race && !state.race) followRace(i.running_race);
}

function setAdminOK(ok) {
  state.adminOK = ok;
  renderWho();
}

// fillStrategies offers, against lock-fence, the strategies that oversell
// in this instance first, then the others (which will stay green).
function fillStrategies() {
  const sel = $('race-vs');
  const keep = sel.value;
  const others = state.strategies.filter((x) => x.name !== 'lock-fence');
  others.sort((a, b) => Number(b.oversells) - Number(a.oversells));
  sel.replaceChildren(...others.map((x) => h('option', { value: x.name }, x.name + (x.oversells ? ' (oversells)' : ' (stays correct here)'))),
    h('option', { value: '' }, 'nothing: one sale, server strategy'));
  if ([...sel.options].some((o) => o.value === keep)) sel.value = keep;
  noteStrategy();
}

function noteStrategy() {
  const x = state.strategies.find((s) => s.name === $('race-vs').value);
  $('race-vs-note').textContent = x ? x.name + ': ' + x.note + '.' : '';
}

async function createProduct(ev) {
  ev.preventDefault();
  const box = $('create-result');
  if (needAdmin(box)) return;
  const body = { name: $('create-name').value, price_cents: toCents($('create-price').value), stock: Number($('create-stock').value), flash_sale: $('create-flash').checked };
  const r = await api('POST', '/api/v1/admin/products', { token: state.adminToken, key: newKey('product'), body });
  show(box, r, r.ok && ['product ', h('b', {}, '#' + r.data.id + ' ' + r.data.name), `, ${r.data.stock} units at ${money(r.data.price_cents)}`]);
  pollProducts();
}

async function restock(ev, again) {
  if (ev) ev.preventDefault();
  const box = $('restock-result');
  if (needAdmin(box)) return;
  if (!again) {
    state.lastRestock = { id: Number($('restock-product').value), key: newKey('restock'), body: { quantity: Number($('restock-qty').value) } };
    $('restock-retry').disabled = false;
  }
  const { id, key, body } = state.lastRestock;
  showKey($('restock-key'), key, 'restock');
  const r = await api('POST', `/api/v1/admin/products/${id}/restock`, { token: state.adminToken, key, body });
  show(box, r, r.ok && [`product #${r.data.id} now has `, h('b', {}, r.data.stock), ' units']);
  pollProducts();
}

async function credit(ev, again) {
  if (ev) ev.preventDefault();
  const box = $('credit-result');
  if (needAdmin(box)) return;
  if (!again) {
    state.lastCredit = { user: Number($('credit-user').value), key: newKey('credit'), body: { amount_cents: toCents($('credit-amount').value) } };
    $('credit-retry').disabled = false;
  }
  const { user, key, body } = state.lastCredit;
  showKey($('credit-key'), key, 'credit');
  const r = await api('POST', `/api/v1/admin/wallets/${user}/credit`, { token: state.adminToken, key, body });
  show(box, r, r.ok && [`user ${r.data.user_id}'s wallet: `, h('b', {}, money(r.data.balance_cents))]);
  if (user === state.userId) refreshWallet();
}

async function runAudit(ev) {
  if (ev) ev.preventDefault();
  const box = $('audit-result');
  if (needAdmin(box)) return;
  const pid = $('audit-product').value;
  const r = await api('GET', '/api/v1/admin/audit' + (pid ? '?product_id=' + encodeURIComponent(pid) : ''), { token: state.adminToken });
  if (!r.ok) {
    $('audit-verdict').replaceChildren();
    return show(box, r);
  }
  box.replaceChildren();
  renderVerdict($('audit-verdict'), r.data);
}

// renderVerdict shows an audit report: green when every invariant holds,
// red with the violations otherwise.
function renderVerdict(el, rep, race) {
  el.className = 'verdict ' + (rep.ok ? 'ok' : 'bad');
  el.dataset.ok = String(rep.ok);
  const head = rep.ok
    ? 'Audit OK: every invariant holds'
    : `Audit FAILED: ${rep.violations.length} violation${rep.violations.length === 1 ? '' : 's'}`;
  el.replaceChildren(h('div', { class: 'head', 'data-testid': 'verdict' }, (rep.ok ? '✔ ' : '✘ ') + head));
  if (race) {
    const over = race.oversold > 0 ? [' — ', h('b', {}, `oversold by ${race.oversold}`)] : [];
    el.append(h('div', {}, `${race.created} orders for ${race.initial_stock} units; stock now ${race.stock}`, over));
  }
  if (rep.violations.length) {
    el.append(h('ul', {}, rep.violations.slice(0, 8).map((v) => h('li', {},
      h('span', { class: 'inv' }, v.invariant), ' ', v.product_id ? `product #${v.product_id}: ` : v.user_id ? `user ${v.user_id}: ` : '', v.detail))));
    if (rep.violations.length > 8) el.append(h('div', {}, `… and ${rep.violations.length - 8} more`));
  }
  const ps = (rep.products || []).slice(0, 6);
  if (ps.length) {
    el.append(h('table', {},
      h('tr', {}, ['product', 'added', 'sold', 'returned', 'stock'].map((t) => h('th', {}, t))),
      ps.map((p) => h('tr', {}, [p.product_id, p.added, p.sold, p.returned, p.stock].map((x) => h('td', {}, x))))));
    if ((rep.products || []).length > ps.length) el.append(h('div', {}, `(${rep.products.length - ps.length} more products checked)`));
  }
  if (rep.lab && rep.lab.products.length) renderLab(el, rep.lab);
  el.append(h('div', { class: 'route' }, 'checked at ' + new Date(rep.checked_at).toLocaleTimeString()));
}

// renderLab shows the lab part of a shop-wide audit: the products lab races
// made and what the unsafe strategies did to them. It is the race's lesson,
// kept apart from the shop's verdict above (which it never turns red).
function renderLab(el, lab) {
  const n = lab.violations.length;
  const box = h('div', { class: 'lab-findings', 'data-testid': 'lab-findings' },
    h('div', { class: 'head' }, n
      ? `Lab findings: ${n} violation${n === 1 ? '' : 's'} on lab race products (the lesson of the race, not a fault of the shop)`
      : `Lab race products: ${lab.products.length}, no violations`));
  const bad = lab.products.filter((p) => lab.violations.some((v) => v.product_id === p.product_id));
  for (const p of bad.slice(0, 4)) {
    const over = Math.max(0, p.sold - p.cancelled - p.added);
    box.append(h('div', {}, `product #${p.product_id} (${p.stock_strategy}): ${p.sold - p.cancelled} units held by orders for ${p.added} added`,
      over > 0 ? [' — ', h('b', {}, `oversold by ${over}`)] : ''));
  }
  if (n) {
    box.append(h('ul', {}, lab.violations.slice(0, 4).map((v) => h('li', {},
      h('span', { class: 'inv' }, v.invariant), ' ', `product #${v.product_id}: `, v.detail))));
    if (n > 4) box.append(h('div', {}, `… and ${n - 4} more`));
  }
  el.append(box);
}

// ---------- operator: flash sale race ----------

async function startRace(ev) {
  ev.preventDefault();
  const box = $('race-result');
  if (needAdmin(box)) return;
  const vs = $('race-vs').value;
  const body = { stock: Number($('race-stock').value), buyers: Number($('race-buyers').value), concurrency: Number($('race-conc').value) };
  if (vs) body.strategies = ['lock-fence', vs];
  const r = await api('POST', '/api/v1/admin/lab/races', { token: state.adminToken, body });
  show(box, r, r.ok && ['race ', h('code', {}, r.data.race_id), ` started: ${r.data.buyers} buyers for ${r.data.initial_stock} units on each side (`,
    r.data.sides.map((s) => `#${s.product_id} ${s.stock_strategy}`).join(' vs '), ')']);
  if (r.ok) followRace(r.data.race_id, r.data);
}

async function followRace(id, first) {
  state.race = id;
  $('race').hidden = false;
  $('race-btn').disabled = true;
  let v = first;
  while (state.race === id) {
    if (v) renderRace(v);
    if (v && v.done) break;
    await new Promise((res) => setTimeout(res, 250));
    const r = await api('GET', '/api/v1/admin/lab/races/' + encodeURIComponent(id), { token: state.adminToken });
    if (!r.ok) {
      show($('race-result'), r);
      break;
    }
    v = r.data;
  }
  state.race = null;
  $('race-btn').disabled = false;
  pollProducts();
}

function stat(cls, value, label, testid) {
  return h('div', { class: 'stat ' + cls }, h('div', { class: 'v', 'data-testid': testid }, value), h('div', { class: 'l' }, label));
}

const saleSeconds = (side) => (side.series.length ? side.series[side.series.length - 1].t_ms : 0) / 1000;

// renderRace draws one panel per side. Every figure of a panel comes from
// one server snapshot (counters, then stock), so a safe side never shows
// more orders + stock than units; both charts share their scales.
function renderRace(v) {
  const race = $('race');
  race.dataset.done = String(v.done);
  race.dataset.sides = String(v.sides.length);
  const phase = $('race-phase');
  const what = {
    login: `Logging in ${v.buyers} buyers per side (demo login)…`,
    race: `Selling… ${Math.max(...v.sides.map(saleSeconds)).toFixed(1)} s`,
    audit: 'Sold: auditing each product…',
    done: `Done: ${v.buyers} buyers, ${v.concurrency} in flight per side, ${(v.elapsed_ms / 1000).toFixed(1)} s with logins and audits`,
  }[v.phase] || 'Starting…';
  phase.className = 'race-head verdict ' + (v.done ? (v.error ? 'bad' : '') : 'running');
  phase.replaceChildren(h('div', { class: 'head' }, what));
  if (v.error) phase.append(h('div', {}, v.error));
  const scale = {
    tMax: Math.max(500, ...v.sides.map((s) => saleSeconds(s) * 1000)),
    uMax: Math.max(1, ...v.sides.map((s) => Math.max(s.initial_stock, s.created, ...s.series.map((p) => Math.max(p.created, p.stock))))) * 1.08,
    aMax: Math.max(1, ...v.sides.map((s) => Math.max(v.buyers - Math.min(v.buyers, s.initial_stock), s.sold_out))) * 1.08,
  };
  const box = $('race-sides');
  v.sides.forEach((s, i) => {
    let el = $('race-side-' + i);
    if (!el) {
      el = h('section', { class: 'side', id: 'race-side-' + i },
        h('h3', {}, h('code', { class: 'name' }), h('span', { class: 'badge' })),
        h('p', { class: 'note' }),
        h('div', { class: 'stats' }), h('div', { class: 'chart' }), h('div', { class: 'verdict' }));
      box.append(el);
    }
    renderSide(el, v, s, scale);
  });
  for (const el of [...box.children].slice(v.sides.length)) el.remove();
}

function renderSide(el, v, s, scale) {
  el.className = 'side ' + (s.safe ? 'safe' : 'unsafe');
  el.dataset.strategy = s.stock_strategy;
  el.dataset.done = String(s.phase === 'done');
  el.querySelector('.name').textContent = s.stock_strategy;
  const x = state.strategies.find((t) => t.name === s.stock_strategy);
  el.querySelector('.badge').textContent = s.safe ? 'safe' : x && x.oversells ? 'unsafe: oversells' : 'lab strategy';
  el.querySelector('.note').textContent = `product #${s.product_id}` + (x ? ' · ' + x.note : '');
  el.querySelector('.stats').replaceChildren(
    stat('', s.initial_stock, 'units on sale', 'units'),
    stat('created', s.created, 'orders created', 'created'),
    stat('stock', s.stock, 'stock left', 'stock'),
    stat(s.oversold > 0 ? 'bad' : '', s.oversold, 'oversold units', 'oversold'),
    stat('soldout', s.sold_out, 'sold-out answers', 'soldout'),
    stat('', s.buyers_done, `of ${v.buyers} buyers answered`, 'done'),
    stat('', s.busy, '503 busy (retried)', 'busy'),
    stat(s.errors ? 'bad' : '', s.errors, 'errors', 'errors'),
  );
  drawChart(el.querySelector('.chart'), v, s, scale);
  const verdict = el.querySelector('.verdict');
  if (s.audit) {
    renderVerdict(verdict, s.audit, s);
    verdict.append(h('div', { class: 'route' }, `sale ${saleSeconds(s).toFixed(1)} s · ${s.sent} requests sent`));
  } else if (v.done) {
    verdict.className = 'verdict bad';
    verdict.replaceChildren(h('div', { class: 'head' }, 'No verdict'), h('div', {}, v.error || 'the audit did not run'));
  } else {
    verdict.className = 'verdict running';
    verdict.dataset.ok = '';
    verdict.replaceChildren(h('div', { class: 'head' }, { login: 'Logging in…', race: 'Selling…', audit: 'Auditing…' }[s.phase] || '…'));
  }
}

// drawChart plots orders and stock (left axis, units) and sold-out answers
// (right axis) over time, with the units on sale as a dashed line: an
// oversell shows as orders climbing above it.
function drawChart(el, v, side, { tMax, uMax, aMax }) {
  const W = 640, H = 240, L = 44, R = 48, T = 14, B = 26;
  const pts = side.series.length ? side.series : [{ t_ms: 0, created: 0, sold_out: 0, stock: side.initial_stock }];
  const x = (t) => L + (t / tMax) * (W - L - R);
  const yu = (u) => T + (1 - u / uMax) * (H - T - B);
  const ya = (a) => T + (1 - a / aMax) * (H - T - B);
  const path = (f, y) => pts.map((p, i) => (i ? 'L' : 'M') + x(p.t_ms).toFixed(1) + ' ' + y(f(p)).toFixed(1)).join(' ');
  const s = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': side.stock_strategy + ' race chart' });
  for (let i = 0; i <= 4; i++) {
    const y = T + (i / 4) * (H - T - B);
    s.append(svg('line', { class: 'grid', x1: L, x2: W - R, y1: y, y2: y }));
    s.append(svg('text', { x: L - 6, y: y + 4, 'text-anchor': 'end' }, Math.round(uMax * (1 - i / 4))));
    s.append(svg('text', { x: W - R + 6, y: y + 4 }, Math.round(aMax * (1 - i / 4))));
  }
  for (let i = 0; i <= 4; i++) {
    const t = (i / 4) * tMax;
    s.append(svg('text', { x: x(t), y: H - 8, 'text-anchor': 'middle' }, (t / 1000).toFixed(1) + ' s'));
  }
  if (side.created > side.initial_stock) {
    s.append(svg('rect', { class: 'over', x: L, y: yu(uMax), width: W - L - R, height: yu(side.initial_stock) - yu(uMax) }));
  }
  s.append(svg('line', { class: 'axis', x1: L, x2: L, y1: T, y2: H - B }));
  s.append(svg('line', { class: 'axis', x1: W - R, x2: W - R, y1: T, y2: H - B }));
  s.append(svg('line', { class: 'axis', x1: L, x2: W - R, y1: H - B, y2: H - B }));
  s.append(svg('line', { class: 'units', x1: L, x2: W - R, y1: yu(side.initial_stock), y2: yu(side.initial_stock) }));
  s.append(svg('path', { class: 'soldout', d: path((p) => p.sold_out, ya) }));
  s.append(svg('path', { class: 'stock', d: path((p) => p.stock, yu) }));
  s.append(svg('path', { class: 'created', d: path((p) => p.created, yu) }));
  el.replaceChildren(s);
}

// ---------- start ----------

function start() {
  window.addEventListener('hashchange', route);
  route();
  // Demo users 1-20 start with $100.00 when the shop made its demo catalog.
  $('login-user').value = state.userId || Math.floor(1 + Math.random() * 20);
  $('login-form').addEventListener('submit', login);
  $('logout-btn').addEventListener('click', () => logout());
  $('order-form').addEventListener('submit', placeOrder);
  $('order-retry').addEventListener('click', sendOrder);
  $('toast').addEventListener('click', () => { $('toast').hidden = true; });
  $('admin-token').value = state.adminToken;
  $('admin-form').addEventListener('submit', useAdmin);
  $('create-form').addEventListener('submit', createProduct);
  $('restock-form').addEventListener('submit', (e) => restock(e, false));
  $('restock-retry').addEventListener('click', () => restock(null, true));
  $('credit-form').addEventListener('submit', (e) => credit(e, false));
  $('credit-retry').addEventListener('click', () => credit(null, true));
  $('audit-form').addEventListener('submit', runAudit);
  $('race-form').addEventListener('submit', startRace);
  $('race-vs').addEventListener('change', noteStrategy);
  $('show-lab').addEventListener('change', () => { state.showLab = $('show-lab').checked; renderProducts(); });
  $('credit-user').value = state.userId || '';
  renderWho();
  pollProducts();
  setInterval(pollProducts, 1000);
  setInterval(() => { if (!document.hidden) refreshUser(); }, 3000);
  refreshUser();
  labInfo(false);
}

document.addEventListener('DOMContentLoaded', start);
