-- Schema v10: changes of long-term memories are entries of the shared outbox too, so that
-- every node's resident memory partitions (memlayer-memory's long_term.rs) follow what other
-- nodes remember, update and forget, and an erasure's receipt waits for them as for the
-- recall indexes (migration 9).
--
-- A memory entry names the memory's tenant, user, id and, unless it was deleted, the
-- revision written: a node holding that user's memories in memory and not that revision
-- loads them again. No text, no vector. Like a removal, it is done when written (nothing to
-- embed, only to follow).
ALTER TABLE embedding_outbox
    ALTER COLUMN sid DROP NOT NULL,
    ADD COLUMN user_id text,
    ADD COLUMN memory_id bigint,
    ADD COLUMN revision bigint,
    DROP CONSTRAINT embedding_outbox_removal_check,
    ADD CONSTRAINT embedding_outbox_removal_check
        CHECK (removal IN ('session', 'message', 'memory')),
    ADD CONSTRAINT embedding_outbox_names_its_subject CHECK (
        CASE WHEN removal = 'memory'
             THEN sid IS NULL AND user_id IS NOT NULL AND memory_id IS NOT NULL
             ELSE sid IS NOT NULL AND user_id IS NULL AND memory_id IS NULL
                  AND revision IS NULL
        END);

-- The entries of one statement's memories (`revision` NULL: deleted), at the next ordinals
-- of this transaction.
CREATE FUNCTION memlayer_queue_memory_changes(tenants text[], users text[], ids bigint[],
                                              revisions bigint[])
RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    base bigint := coalesce((SELECT max(o.ord) + 1 FROM embedding_outbox o
                             WHERE o.xid = pg_current_xact_id()), 0);
BEGIN
    INSERT INTO embedding_outbox (tenant, xid, ord, first_index, count, embedded_at, removal,
                                  user_id, memory_id, revision)
        SELECT c.tenant, pg_current_xact_id(), base + c.n - 1, 0, 0, clock_timestamp(),
               'memory', c.user_id, c.id, c.revision
        FROM unnest(tenants, users, ids, revisions) WITH ORDINALITY
             AS c(tenant, user_id, id, revision, n);
END
$fn$;

CREATE FUNCTION memlayer_memories_written() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM memlayer_queue_memory_changes(
        ARRAY(SELECT tenant FROM written ORDER BY id),
        ARRAY(SELECT user_id FROM written ORDER BY id),
        ARRAY(SELECT id FROM written ORDER BY id),
        ARRAY(SELECT revision FROM written ORDER BY id));
    RETURN NULL;
END
$fn$;
CREATE TRIGGER memories_inserted AFTER INSERT ON memories
    REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION memlayer_memories_written();
CREATE TRIGGER memories_updated AFTER UPDATE ON memories
    REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION memlayer_memories_written();

CREATE FUNCTION memlayer_memories_removed() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM memlayer_queue_memory_changes(
        ARRAY(SELECT tenant FROM gone ORDER BY id),
        ARRAY(SELECT user_id FROM gone ORDER BY id),
        ARRAY(SELECT id FROM gone ORDER BY id),
        ARRAY(SELECT NULL::bigint FROM gone ORDER BY id));
    RETURN NULL;
END
$fn$;
CREATE TRIGGER memories_removed AFTER DELETE ON memories
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION memlayer_memories_removed();
