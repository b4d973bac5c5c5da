-- 0004: who wrote products.fence. A failover can lose the fence counter's
-- last INCR and hand the same fence to a second lock holder; with the
-- holder (the lock's owner token) stored beside the fence, the fenced stock
-- UPDATE takes an equal fence only from the holder that wrote it.
ALTER TABLE products ADD COLUMN fence_holder VARCHAR(64) NOT NULL DEFAULT '';
