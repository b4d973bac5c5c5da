-- 0005: see ../mysql/0005_stock_buckets.sql.
ALTER TABLE products ADD COLUMN buckets INTEGER NOT NULL DEFAULT 1;
CREATE TABLE IF NOT EXISTS stock_buckets (
  product_id   INTEGER NOT NULL,
  bucket       INTEGER NOT NULL,
  stock        INTEGER NOT NULL CHECK (stock >= 0),
  fence        INTEGER NOT NULL DEFAULT 0,
  fence_holder TEXT    NOT NULL DEFAULT '',
  version      INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (product_id, bucket)
);
ALTER TABLE stock_ledger ADD COLUMN bucket INTEGER NOT NULL DEFAULT 0;
