-- 0001: the whole schema of the shop, SQLite dialect (embedded demo only).
-- Kept column-for-column in step with ../mysql/0001_init.sql.

CREATE TABLE IF NOT EXISTS products (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  name         TEXT    NOT NULL,
  price_cents  INTEGER NOT NULL,
  stock        INTEGER NOT NULL CHECK (stock >= 0),
  fence        INTEGER NOT NULL DEFAULT 0,
  version      INTEGER NOT NULL DEFAULT 0,
  idem_ref     TEXT    NULL UNIQUE,
  request_hash TEXT    NOT NULL DEFAULT '',
  created_at   DATETIME NOT NULL,
  updated_at   DATETIME NOT NULL
);

CREATE TABLE IF NOT EXISTS stock_ledger (
  id         INTEGER PRIMARY KEY AUTOINCREMENT,
  product_id INTEGER NOT NULL,
  delta      INTEGER NOT NULL,
  reason     TEXT    NOT NULL,
  order_no   TEXT    NULL,
  ref        TEXT    NULL UNIQUE,
  fence      INTEGER NOT NULL DEFAULT 0,
  created_at DATETIME NOT NULL,
  UNIQUE (order_no, reason)
);
CREATE INDEX IF NOT EXISTS ix_ledger_product ON stock_ledger (product_id);

CREATE TABLE IF NOT EXISTS orders (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  order_no     TEXT    NOT NULL UNIQUE,
  user_id      INTEGER NOT NULL,
  product_id   INTEGER NOT NULL,
  quantity     INTEGER NOT NULL,
  amount_cents INTEGER NOT NULL,
  kind         TEXT    NOT NULL,
  status       TEXT    NOT NULL,
  version      INTEGER NOT NULL DEFAULT 0,
  idem_key     TEXT    NULL,
  request_hash TEXT    NOT NULL DEFAULT '',
  created_at   DATETIME NOT NULL,
  paid_at      DATETIME NULL,
  cancelled_at DATETIME NULL,
  updated_at   DATETIME NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_orders_user ON orders (user_id, created_at, order_no);
CREATE INDEX IF NOT EXISTS ix_orders_status ON orders (status, created_at);
CREATE INDEX IF NOT EXISTS ix_orders_product ON orders (product_id, status);

CREATE TABLE IF NOT EXISTS wallets (
  user_id       INTEGER PRIMARY KEY,
  balance_cents INTEGER NOT NULL DEFAULT 0 CHECK (balance_cents >= 0),
  version       INTEGER NOT NULL DEFAULT 0,
  created_at    DATETIME NOT NULL,
  updated_at    DATETIME NOT NULL
);

CREATE TABLE IF NOT EXISTS wallet_ledger (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  user_id      INTEGER NOT NULL,
  delta        INTEGER NOT NULL,
  reason       TEXT    NOT NULL,
  ref          TEXT    NOT NULL,
  request_hash TEXT    NOT NULL DEFAULT '',
  created_at   DATETIME NOT NULL,
  UNIQUE (reason, ref)
);
CREATE INDEX IF NOT EXISTS ix_wallet_ledger_user ON wallet_ledger (user_id);

CREATE TABLE IF NOT EXISTS payments (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  request_id   TEXT    NOT NULL UNIQUE,
  order_no     TEXT    NOT NULL UNIQUE,
  user_id      INTEGER NOT NULL,
  amount_cents INTEGER NOT NULL,
  request_hash TEXT    NOT NULL DEFAULT '',
  fence        INTEGER NOT NULL DEFAULT 0,
  created_at   DATETIME NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_payments_user ON payments (user_id);
