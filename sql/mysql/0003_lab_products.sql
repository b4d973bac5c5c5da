-- 0003: the products a lab race created, with the stock strategy its buyers
-- raced under. The shop-wide audit reports them apart (docs/api.md, Audit):
-- an unsafe strategy's oversell is the race's lesson, not a fault of the shop.
CREATE TABLE IF NOT EXISTS lab_products (
  product_id     BIGINT      NOT NULL,
  stock_strategy VARCHAR(32) NOT NULL,
  created_at     DATETIME(6) NOT NULL,
  PRIMARY KEY (product_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
