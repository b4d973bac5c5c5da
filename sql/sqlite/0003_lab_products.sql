-- 0003: see ../mysql/0003_lab_products.sql.
CREATE TABLE IF NOT EXISTS lab_products (
  product_id     INTEGER  NOT NULL PRIMARY KEY,
  stock_strategy TEXT     NOT NULL,
  created_at     DATETIME NOT NULL
);
