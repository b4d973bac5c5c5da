-- 0002: see ../mysql/0002_restock_request_hash.sql.
ALTER TABLE stock_ledger ADD COLUMN request_hash TEXT NOT NULL DEFAULT '';
