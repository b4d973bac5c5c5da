-- 0006: a product on flash sale. The demo page offers the seckill button
-- (POST /api/v1/seckill/{id}/orders) on these products only, and leaves
-- them out of the regular-order list. The API does not refuse a seckill
-- order of another product (docs/api.md): load tests race any product.
ALTER TABLE products ADD COLUMN flash_sale BOOLEAN NOT NULL DEFAULT FALSE;
