-- 0001: the whole schema of the shop (MySQL 8 / MariaDB 10.6+).
-- Every statement is idempotent (IF NOT EXISTS) because MySQL DDL is not
-- transactional: a migration interrupted half-way is simply run again.

CREATE TABLE IF NOT EXISTS products (
  id          BIGINT       NOT NULL AUTO_INCREMENT,
  name        VARCHAR(200) NOT NULL,
  price_cents BIGINT       NOT NULL,
  stock       BIGINT       NOT NULL,
  -- highest lock fencing token a stock write was accepted with
  fence       BIGINT       NOT NULL DEFAULT 0,
  version     BIGINT       NOT NULL DEFAULT 0,
  -- scoped Idempotency-Key of the create request, if one was sent
  idem_ref    VARCHAR(128) NULL,
  request_hash VARCHAR(64) NOT NULL DEFAULT '',
  created_at  DATETIME(6)  NOT NULL,
  updated_at  DATETIME(6)  NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uq_products_idem_ref (idem_ref),
  CONSTRAINT ck_products_stock CHECK (stock >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Append-only: every change of products.stock has exactly one row here.
CREATE TABLE IF NOT EXISTS stock_ledger (
  id          BIGINT       NOT NULL AUTO_INCREMENT,
  product_id  BIGINT       NOT NULL,
  delta       BIGINT       NOT NULL,
  reason      VARCHAR(16)  NOT NULL, -- create | restock | order | cancel
  order_no    VARCHAR(64)  NULL,
  ref         VARCHAR(128) NULL,     -- restock idempotency reference
  fence       BIGINT       NOT NULL DEFAULT 0,
  created_at  DATETIME(6)  NOT NULL,
  PRIMARY KEY (id),
  -- an order takes its stock once and gives it back at most once
  UNIQUE KEY uq_ledger_order_reason (order_no, reason),
  UNIQUE KEY uq_ledger_ref (ref),
  KEY ix_ledger_product (product_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS orders (
  id           BIGINT       NOT NULL AUTO_INCREMENT,
  order_no     VARCHAR(64)  NOT NULL,
  user_id      BIGINT       NOT NULL,
  product_id   BIGINT       NOT NULL,
  quantity     INT          NOT NULL,
  amount_cents BIGINT       NOT NULL,
  kind         VARCHAR(16)  NOT NULL, -- seckill | regular
  status       VARCHAR(16)  NOT NULL, -- pending | paid | cancelled
  version      BIGINT       NOT NULL DEFAULT 0,
  -- the client's idempotency key (regular orders) and the request fingerprint,
  -- so a retry can be answered from the database when Redis forgot it
  idem_key     VARCHAR(300) NULL,
  request_hash VARCHAR(64)  NOT NULL DEFAULT '',
  created_at   DATETIME(6)  NOT NULL,
  paid_at      DATETIME(6)  NULL,
  cancelled_at DATETIME(6)  NULL,
  updated_at   DATETIME(6)  NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uq_orders_order_no (order_no),
  KEY ix_orders_user (user_id, created_at, order_no),
  KEY ix_orders_status (status, created_at),
  KEY ix_orders_product (product_id, status)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS wallets (
  user_id       BIGINT      NOT NULL,
  balance_cents BIGINT      NOT NULL DEFAULT 0,
  version       BIGINT      NOT NULL DEFAULT 0,
  created_at    DATETIME(6) NOT NULL,
  updated_at    DATETIME(6) NOT NULL,
  PRIMARY KEY (user_id),
  CONSTRAINT ck_wallets_balance CHECK (balance_cents >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Append-only: balance_cents is the sum of this ledger.
CREATE TABLE IF NOT EXISTS wallet_ledger (
  id           BIGINT       NOT NULL AUTO_INCREMENT,
  user_id      BIGINT       NOT NULL,
  delta        BIGINT       NOT NULL,
  reason       VARCHAR(16)  NOT NULL, -- credit | payment
  ref          VARCHAR(128) NOT NULL, -- credit request id or order number
  request_hash VARCHAR(64)  NOT NULL DEFAULT '',
  created_at   DATETIME(6)  NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uq_wallet_ledger_ref (reason, ref),
  KEY ix_wallet_ledger_user (user_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The transactional idempotency record of the money path: written in the
-- same transaction as the debit, unique per request and per order.
CREATE TABLE IF NOT EXISTS payments (
  id           BIGINT       NOT NULL AUTO_INCREMENT,
  request_id   VARCHAR(128) NOT NULL,
  order_no     VARCHAR(64)  NOT NULL,
  user_id      BIGINT       NOT NULL,
  amount_cents BIGINT       NOT NULL,
  request_hash VARCHAR(64)  NOT NULL DEFAULT '',
  fence        BIGINT       NOT NULL DEFAULT 0,
  created_at   DATETIME(6)  NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uq_payments_request (request_id),
  UNIQUE KEY uq_payments_order (order_no),
  KEY ix_payments_user (user_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
