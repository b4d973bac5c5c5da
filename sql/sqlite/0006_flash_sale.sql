-- 0006: see ../mysql/0006_flash_sale.sql.
ALTER TABLE products ADD COLUMN flash_sale BOOLEAN NOT NULL DEFAULT 0;
