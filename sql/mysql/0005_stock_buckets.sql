-- 0005: stock buckets (docs chapter 9). A hot product's stock may be held
-- in K rows, each with its own lock and fence, so instances that each own
-- a bucket deduct side by side. Bucket 0 is the products row itself (its
-- stock, fence, fence_holder and version); buckets 1..K-1 are rows here.
-- A product with buckets = 1 (every product unless SHOP_STOCK_BUCKETS says
-- otherwise) has no rows here and is exactly what it was before.
ALTER TABLE products ADD COLUMN buckets INT NOT NULL DEFAULT 1;
CREATE TABLE IF NOT EXISTS stock_buckets (
  product_id   BIGINT      NOT NULL,
  bucket       INT         NOT NULL,
  stock        BIGINT      NOT NULL,
  fence        BIGINT      NOT NULL DEFAULT 0,
  fence_holder VARCHAR(64) NOT NULL DEFAULT '',
  version      BIGINT      NOT NULL DEFAULT 0,
  PRIMARY KEY (product_id, bucket),
  CONSTRAINT ck_stock_buckets_stock CHECK (stock >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
-- The bucket an `order` ledger row took its units from (the first, when it
-- took from several), so the fence check (L2) compares the fences of one
-- lock key: each bucket has its own fence counter.
ALTER TABLE stock_ledger ADD COLUMN bucket INT NOT NULL DEFAULT 0;
