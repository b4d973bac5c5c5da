-- 0007: the queued seckill mode (SHOP_SECKILL_MODE=queue). An order accepted
-- with 202 that the consumer can never place (the database's stock ran out
-- first, the buyer's unpaid limit) ends here, under its order number, so the
-- buyer reads `rejected` with its reason and a redelivered message is
-- acknowledged without being placed. An accepted order ends either as a row
-- of orders or as a row here, never both (invariant O3q).
CREATE TABLE IF NOT EXISTS seckill_rejections (
  order_no    VARCHAR(64) NOT NULL,
  user_id     BIGINT      NOT NULL,
  product_id  BIGINT      NOT NULL,
  reason      VARCHAR(32) NOT NULL, -- sold_out | unpaid_limit
  created_at  DATETIME(6) NOT NULL,
  PRIMARY KEY (order_no),
  KEY ix_seckill_rejections_product (product_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
