-- Schema v5: the embedding pipeline's side (src/embeddings.rs): the appends waiting to be
-- embedded, the stored vectors, and the counter that tells index snapshots the set of vectors
-- changed.
--
-- Keys: vectors are derived from message content, so they are sealed like it, under the
-- session's data key (the `data_keys` row named by `sessions.key_id`) bound to (tenant,
-- session, index). Every erasure the redb store can do to a vector is one PostgreSQL does by
-- deleting rows the vector hangs on: deleting the session destroys that key (crypto-shredding,
-- as for the messages) and cascades to the vector rows; erasing one message deletes its row,
-- which cascades to its vector. No other key is involved.

-- Appends not yet embedded, and messages queued again by a reset. A row's place is its
-- transaction id (`xid`, the appending transaction's) and its ordinal among that
-- transaction's rows (`ord`): readers deliver only rows of transactions below the oldest
-- running one, in (xid, ord) order, so the rows at or below a delivered place are final (see
-- src/embeddings.rs, and src/feed.rs for the same horizon).
CREATE TABLE embedding_outbox (
    tenant text NOT NULL,
    xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    ord bigint NOT NULL CHECK (ord >= 0),
    -- The session's surrogate key: a session deleted and created again under its id gets
    -- another, so an old row never names the new session's messages.
    sid bigint NOT NULL REFERENCES sessions (sid) ON DELETE CASCADE,
    first_index bigint NOT NULL,
    count bigint NOT NULL,
    PRIMARY KEY (tenant, xid, ord)
);
-- The pipeline's reading order, across tenants, and the look-up of a delivered place.
CREATE UNIQUE INDEX embedding_outbox_by_place ON embedding_outbox (xid, ord);
-- For the cascade when a session is deleted.
CREATE INDEX embedding_outbox_by_session ON embedding_outbox (sid);

-- Every append's `feed` row (written by memlayer_append in the appending transaction) queues
-- the append for embedding in that same transaction. A trigger rather than a change to
-- memlayer_append, so that whatever else writes `feed` rows queues them too.
CREATE FUNCTION memlayer_enqueue_embedding() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    -- Only this transaction writes rows under its own xid, so the next ordinal is free.
    INSERT INTO embedding_outbox (tenant, xid, ord, sid, first_index, count)
        SELECT NEW.tenant, NEW.xid,
               coalesce((SELECT max(o.ord) + 1 FROM embedding_outbox o WHERE o.xid = NEW.xid), 0),
               s.sid, NEW.first_index, NEW.count
        FROM sessions s
        WHERE s.tenant = NEW.tenant AND s.session_id = NEW.session_id;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER feed_queues_embedding AFTER INSERT ON feed
    FOR EACH ROW EXECUTE FUNCTION memlayer_enqueue_embedding();

-- The stored vectors, one per message, sealed under the session's data key. Role and time
-- are read from the message row, which a vector cannot outlive.
CREATE TABLE embedding_vectors (
    tenant text NOT NULL,
    session_id text NOT NULL,
    idx bigint NOT NULL,
    sid bigint NOT NULL,
    -- The components as little-endian f32, sealed (24-byte nonce, ciphertext, tag).
    components bytea NOT NULL,
    PRIMARY KEY (tenant, session_id, idx),
    FOREIGN KEY (tenant, session_id, idx) REFERENCES messages ON DELETE CASCADE
);
-- Index rebuilds page through every vector in key order.
CREATE UNIQUE INDEX embedding_vectors_by_key ON embedding_vectors (sid, idx);

-- The store-wide state of the embeddings: one row. `vectors_version` changes whenever the set
-- of stored vectors does, in the transaction that changes it; the model is the one the stored
-- vectors were made with (NULL before the first store and after a reset). Not by tenant: the
-- pipeline and its model are the whole store's.
CREATE TABLE embedding_state (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    vectors_version bigint NOT NULL DEFAULT 0,
    model_name text,
    model_sha256 text,
    model_dimension integer
);
INSERT INTO embedding_state DEFAULT VALUES;

-- Raises `vectors_version` once per transaction. Transactions call it (directly, or through
-- the deferred trigger below) as the last lock they take, so waiting for this one row lock
-- never closes a cycle of waits.
CREATE FUNCTION memlayer_bump_vectors_version() RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    IF current_setting('memlayer.vectors_bumped', true) IS DISTINCT FROM pg_current_xact_id()::text THEN
        UPDATE embedding_state SET vectors_version = vectors_version + 1;
        PERFORM set_config('memlayer.vectors_bumped', pg_current_xact_id()::text, true);
    END IF;
END
$fn$;

CREATE FUNCTION memlayer_vector_deleted() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM memlayer_bump_vectors_version();
    RETURN NULL;
END
$fn$;
-- Any deletion of vectors (a reset, a session deleted, a message erased, whoever does it)
-- changes the set: deferred to the commit, so the counter's lock is taken last.
CREATE CONSTRAINT TRIGGER vectors_deleted AFTER DELETE ON embedding_vectors
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION memlayer_vector_deleted();
