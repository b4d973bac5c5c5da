-- 0002: the request fingerprint of a restock, so a retry whose Redis
-- idempotency record was lost is told apart from a different request that
-- reuses its key (422) by the database alone.
ALTER TABLE stock_ledger ADD COLUMN request_hash VARCHAR(64) NOT NULL DEFAULT '';
