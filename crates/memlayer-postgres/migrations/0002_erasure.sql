-- Schema v2: what erasure needs besides deleting rows.

-- One row per destroyed data key, written by the transaction that destroys it: the partition of
-- `data_keys` that held it and that transaction's id. The key's bytes stay in that partition's
-- file (a deleted tuple is only marked dead) and in the WAL until `PgStore::reclaim_destroyed_keys`
-- rewrites the partition and retires the WAL; a row stays until a reclaim did both, so a crash
-- between an erasure and its reclaim does not lose the work. Holds no key and no content.
CREATE TABLE destroyed_keys (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- `data_keys_NN`, as `tableoid::regclass` named it.
    partition text NOT NULL,
    -- The rewrite removes the dead tuple only once no transaction can still see it, that is
    -- once every transaction older than this one has ended.
    xid xid8 NOT NULL DEFAULT pg_current_xact_id()
);

-- ANALYZE (autovacuum runs it) would copy sample values of `key` into `pg_statistic` as
-- histogram bounds: key bytes in a catalog no erasure rewrites. No statistics are gathered for
-- the column; no query filters or sorts on it.
ALTER TABLE data_keys ALTER COLUMN key SET STATISTICS 0;
