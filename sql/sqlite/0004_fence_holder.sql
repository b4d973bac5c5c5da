-- 0004: see ../mysql/0004_fence_holder.sql.
ALTER TABLE products ADD COLUMN fence_holder TEXT NOT NULL DEFAULT '';
