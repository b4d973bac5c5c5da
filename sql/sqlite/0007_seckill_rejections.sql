-- 0007: see ../mysql/0007_seckill_rejections.sql.
CREATE TABLE IF NOT EXISTS seckill_rejections (
  order_no    TEXT     NOT NULL PRIMARY KEY,
  user_id     INTEGER  NOT NULL,
  product_id  INTEGER  NOT NULL,
  reason      TEXT     NOT NULL,
  created_at  DATETIME NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_seckill_rejections_product ON seckill_rejections (product_id);
