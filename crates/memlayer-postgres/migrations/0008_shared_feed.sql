-- Schema v8: the embedding outbox shared by every node on the database (src/embeddings.rs,
-- "Several nodes").
--
-- Before, an entry left the outbox when its vectors were stored, so only the node that
-- embedded an append ever indexed it. Now an entry stays, marked `embedded_at`, and every
-- node's indexes follow the outbox in position order, taking what other nodes embedded with
-- its stored vectors. Entries embedded longer ago than the retention are pruned; the highest
-- position pruned is kept, so a node that followed less than that knows it missed entries.
--
-- Nodes share the embedding work by claiming entries: `claimed_until` is a lease by the
-- database's clock. An entry whose lease ran out (its node died) is claimed again.
--
-- An entry names a session's surrogate key and a range of indices: no content, no
-- identifier but its tenant.
ALTER TABLE embedding_outbox
    ADD COLUMN embedded_at timestamptz,
    ADD COLUMN claimed_until timestamptz;
-- What waits to be embedded, oldest first: claims and the gauge read only these.
CREATE INDEX embedding_outbox_waiting ON embedding_outbox (xid, ord) WHERE embedded_at IS NULL;
-- Pruning reads the oldest embedded entries.
CREATE INDEX embedding_outbox_by_embedding ON embedding_outbox (embedded_at)
    WHERE embedded_at IS NOT NULL;
-- The highest position pruned: xid << 24 | ord, as src/embeddings.rs numbers positions.
ALTER TABLE embedding_state ADD COLUMN pruned_through bigint NOT NULL DEFAULT 0;

-- Erasures are entries too, so that every node takes erased messages out of its indexes.
-- A row with `removal` set is not an append: 'session' (the session `sid` was deleted) or
-- 'message' (its message `first_index` was). Such a row is done when written (`embedded_at`):
-- nothing to embed, only to follow. Rows of a deleted session stay until pruned (nothing to
-- index is left behind them), so the foreign key goes; its rows still waiting to be embedded
-- go with it (the trigger below), as the cascade did.
ALTER TABLE embedding_outbox
    DROP CONSTRAINT embedding_outbox_sid_fkey,
    ADD COLUMN removal text CHECK (removal IN ('session', 'message'));

-- Writes the removal rows of one statement's deleted rows (`gone`: sid and index), at the
-- next ordinals of this transaction.
CREATE FUNCTION memlayer_queue_removals(kind text, gone_tenants text[], gone_sids bigint[],
                                        gone_indices bigint[])
RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    base bigint := coalesce((SELECT max(o.ord) + 1 FROM embedding_outbox o
                             WHERE o.xid = pg_current_xact_id()), 0);
BEGIN
    INSERT INTO embedding_outbox (tenant, xid, ord, sid, first_index, count, embedded_at, removal)
        SELECT g.tenant, pg_current_xact_id(), base + g.n - 1, g.sid, g.idx, 0,
               clock_timestamp(), kind
        FROM unnest(gone_tenants, gone_sids, gone_indices) WITH ORDINALITY
             AS g(tenant, sid, idx, n);
END
$fn$;

CREATE FUNCTION memlayer_sessions_removed() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM embedding_outbox o USING gone
    WHERE o.sid = gone.sid AND o.embedded_at IS NULL;
    PERFORM memlayer_queue_removals('session',
        ARRAY(SELECT tenant FROM gone ORDER BY sid),
        ARRAY(SELECT sid FROM gone ORDER BY sid),
        ARRAY(SELECT 0::bigint FROM gone ORDER BY sid));
    RETURN NULL;
END
$fn$;
CREATE TRIGGER sessions_removed AFTER DELETE ON sessions
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION memlayer_sessions_removed();

-- A message deleted with its session has no session left to join: the session's row covers it.
CREATE FUNCTION memlayer_messages_removed() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    tenants text[];
    sids bigint[];
    indices bigint[];
BEGIN
    SELECT array_agg(s.tenant ORDER BY s.sid, gone.idx), array_agg(s.sid ORDER BY s.sid, gone.idx),
           array_agg(gone.idx ORDER BY s.sid, gone.idx)
        INTO tenants, sids, indices
        FROM gone JOIN sessions s ON s.tenant = gone.tenant AND s.session_id = gone.session_id;
    IF sids IS NOT NULL THEN
        PERFORM memlayer_queue_removals('message', tenants, sids, indices);
    END IF;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER messages_removed AFTER DELETE ON messages
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION memlayer_messages_removed();
