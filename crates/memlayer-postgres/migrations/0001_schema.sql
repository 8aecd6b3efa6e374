-- Schema v1: sessions, their sealed messages, runs and summaries, idempotency records, the
-- data keys that seal them, the change feed, and the one function that appends.
--
-- The tenant leads every primary key, so the tables can later be distributed by tenant (Citus)
-- with every statement touching one tenant's rows. Times are microseconds since the Unix epoch,
-- as `memlayer_store::Timestamp` holds them, so nothing is rounded on the way.

CREATE TABLE sessions (
    tenant text NOT NULL,
    session_id text NOT NULL,
    -- The session's surrogate key, never reused: a session deleted and created again under
    -- its id gets a new one (`memlayer_store::SessionVersion`, and `MessageKey` later).
    sid bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    user_id text NOT NULL,
    agent_id text NOT NULL,
    flow_id text,
    -- The caller's metadata as JSON text, sealed under the session's data key (index 0).
    metadata bytea NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    -- Also the index the next message gets: appends allocate indices by raising it.
    message_count bigint NOT NULL DEFAULT 0 CHECK (message_count >= 0),
    run_count bigint NOT NULL DEFAULT 0,
    -- Context loads start here; messages before it were cleared.
    load_from bigint NOT NULL DEFAULT 0,
    -- The role of the last message (`Role` as numbered in src/sessions.rs): a user message
    -- without an answer after it makes the session's state an incomplete turn.
    last_role smallint,
    -- How many of its messages were erased one by one; with `sid`, the session's version.
    erased bigint NOT NULL DEFAULT 0 CHECK (erased >= 0),
    -- Ended (idle too long, or by request): no longer among the open sessions, for good.
    ended boolean NOT NULL DEFAULT false,
    -- The data key that seals this session's messages, metadata, runs and summary.
    key_id uuid NOT NULL,
    PRIMARY KEY (tenant, session_id)
);
-- Listings, most recently active first, for the tenant, a user or an agent. Session ids
-- compare bytewise (as in the redb store), whatever the database's collation.
CREATE INDEX sessions_by_activity ON sessions (tenant, updated_at, session_id COLLATE "C");
CREATE INDEX sessions_by_user ON sessions (tenant, user_id, updated_at, session_id COLLATE "C");
CREATE INDEX sessions_by_agent ON sessions (tenant, agent_id, updated_at, session_id COLLATE "C");
-- Open sessions by last activity, across tenants: finding the idle ones reads only them.
CREATE INDEX open_sessions ON sessions (updated_at, tenant COLLATE "C", session_id COLLATE "C")
    WHERE NOT ended;

-- The data keys, one per session. Destroying a row makes everything sealed under it
-- unreadable (crypto-shredding); hash partitions keep the rewrite an erasure needs to the few
-- small partitions that held destroyed keys.
CREATE TABLE data_keys (
    tenant text NOT NULL,
    key_id uuid NOT NULL,
    key bytea NOT NULL CHECK (octet_length(key) = 32),
    PRIMARY KEY (tenant, key_id)
) PARTITION BY HASH (key_id);
CREATE TABLE data_keys_00 PARTITION OF data_keys FOR VALUES WITH (MODULUS 16, REMAINDER 0);
CREATE TABLE data_keys_01 PARTITION OF data_keys FOR VALUES WITH (MODULUS 16, REMAINDER 1);
CREATE TABLE data_keys_02 PARTITION OF data_keys FOR VALUES WITH (MODULUS 16, REMAINDER 2);
CREATE TABLE data_keys_03 PARTITION OF data_keys FOR VALUES WITH (MODULUS 16, REMAINDER 3);
CREATE TABLE data_keys_04 PARTITION OF data_keys FOR VALUES WITH (MODULUS 16, REMAINDER 4);
CREATE TABLE data_keys_05 PARTITION OF data_keys FOR VALUES WITH (MODULUS 16, REMAINDER 5);
CREATE TABLE data_keys_06 PARTITION OF data_keys FOR VALUES WITH (MODULUS 16, REMAINDER 6);
CREATE TABLE data_keys_07 PARTITION OF data_keys FOR VALUES WITH (MODULUS 16, REMAINDER 7);
CREATE TABLE data_keys_08 PARTITION OF data_keys FOR VALUES WITH (MODULUS 16, REMAINDER 8);
CREATE TABLE data_keys_09 PARTITION OF data_keys FOR VALUES WITH (MODULUS 16, REMAINDER 9);
CREATE TABLE data_keys_10 PARTITION OF data_keys FOR VALUES WITH (MODULUS 16, REMAINDER 10);
CREATE TABLE data_keys_11 PARTITION OF data_keys FOR VALUES WITH (MODULUS 16, REMAINDER 11);
CREATE TABLE data_keys_12 PARTITION OF data_keys FOR VALUES WITH (MODULUS 16, REMAINDER 12);
CREATE TABLE data_keys_13 PARTITION OF data_keys FOR VALUES WITH (MODULUS 16, REMAINDER 13);
CREATE TABLE data_keys_14 PARTITION OF data_keys FOR VALUES WITH (MODULUS 16, REMAINDER 14);
CREATE TABLE data_keys_15 PARTITION OF data_keys FOR VALUES WITH (MODULUS 16, REMAINDER 15);

-- Content and metadata are sealed (24-byte nonce, then ciphertext and tag) under the session's
-- data key; role, time and token count are not, as context building reads them without text.
CREATE TABLE messages (
    tenant text NOT NULL,
    session_id text NOT NULL,
    idx bigint NOT NULL,
    role smallint NOT NULL,
    content bytea NOT NULL,
    metadata bytea NOT NULL,
    "timestamp" bigint NOT NULL,
    token_count bigint NOT NULL,
    PRIMARY KEY (tenant, session_id, idx),
    FOREIGN KEY (tenant, session_id) REFERENCES sessions ON DELETE CASCADE
);

-- Agent executions, in the order they were recorded (`position`, from 0: the session's
-- `run_count` before it). Content, tool calls, error and metadata are sealed under the
-- session's data key for their position; content and error are NULL when the run has none.
CREATE TABLE runs (
    tenant text NOT NULL,
    session_id text NOT NULL,
    position bigint NOT NULL,
    run_id text NOT NULL,
    -- `RunStatus` as numbered in src/runs.rs.
    status smallint NOT NULL,
    content bytea,
    tool_calls bytea NOT NULL,
    error bytea,
    metadata bytea NOT NULL,
    created_at bigint NOT NULL,
    redacted boolean NOT NULL DEFAULT false,
    PRIMARY KEY (tenant, session_id, position),
    UNIQUE (tenant, session_id, run_id),
    FOREIGN KEY (tenant, session_id) REFERENCES sessions ON DELETE CASCADE
);

-- A session's rolling summary, sealed under its data key for `last_index`.
CREATE TABLE summaries (
    tenant text NOT NULL,
    session_id text NOT NULL,
    text bytea NOT NULL,
    first_index bigint NOT NULL,
    last_index bigint NOT NULL,
    created_at bigint NOT NULL,
    PRIMARY KEY (tenant, session_id),
    FOREIGN KEY (tenant, session_id) REFERENCES sessions ON DELETE CASCADE
);

-- What a keyed append did, so that its retry answers the same without writing again. The
-- digest covers the request's messages, so a different request under the same key is told
-- apart. It is keyed with the session's data key (an HMAC), so a digest left in an old row
-- version confirms no guess once an erasure destroyed that key; NULL once a message of the
-- session was erased (the re-key cannot key it again): a retry then answers the first result
-- whatever its body.
CREATE TABLE idempotency (
    tenant text NOT NULL,
    session_id text NOT NULL,
    key text NOT NULL,
    digest bytea,
    first_index bigint NOT NULL,
    count bigint NOT NULL,
    created_session boolean NOT NULL,
    PRIMARY KEY (tenant, session_id, key),
    FOREIGN KEY (tenant, session_id) REFERENCES sessions ON DELETE CASCADE
);

-- One row per append, written by the appending transaction with its transaction id. Readers
-- deliver only rows of transactions older than every running one (src/feed.rs).
CREATE TABLE feed (
    tenant text NOT NULL,
    session_id text NOT NULL,
    first_index bigint NOT NULL,
    count bigint NOT NULL,
    xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    -- With the transaction: a session deleted and created again under its id appends at
    -- index 0 again, while the old session's rows may still be here.
    PRIMARY KEY (tenant, session_id, first_index, xid)
);
CREATE INDEX feed_by_xid ON feed (xid, tenant, session_id, first_index);

-- Appends messages in one statement, so an append is one round trip and holds the session's
-- row lock only while this function runs, never across a network wait.
--
-- The caller sealed the messages for indices starting at `p_expected` under the key
-- `p_key_id` (a new key `p_key` when the append may create the session). Ownership and the
-- idempotency record are checked first; then the session row is raised by the message count
-- only if it still stands at `p_expected` with that key. Otherwise nothing is written and the
-- answer is 'retry' with the session's key and count, for the caller to seal again: the
-- indices are bound into each ciphertext, so they must be known before sealing. Indices stay
-- gapless because only a successful raise inserts messages, in the same transaction.
--
-- Outcomes: 'appended', 'replayed', 'retry', 'not_found' (no session, or another user's),
-- 'taken' (the id belongs to another owner), 'idempotency_conflict', 'too_many'.
CREATE FUNCTION memlayer_append(
    p_tenant text,
    p_session_id text,
    p_user text,
    p_create_user text,
    p_create_agent text,
    p_create_flow text,
    -- Sealed under `p_key` for the session's metadata place.
    p_create_metadata bytea,
    p_key_id uuid,
    p_key bytea,
    p_expected bigint,
    p_idempotency_key text,
    p_digest bytea,
    p_now bigint,
    p_max_messages bigint,
    p_roles smallint[],
    p_contents bytea[],
    p_metadata bytea[],
    p_timestamps bigint[],
    p_token_counts bigint[]
) RETURNS TABLE (
    outcome text,
    first_index bigint,
    count bigint,
    created_session boolean,
    key_id uuid,
    key bytea
)
LANGUAGE plpgsql AS $fn$
DECLARE
    s sessions%ROWTYPE;
    previous idempotency%ROWTYPE;
    n bigint := cardinality(p_roles);
    first bigint;
    created boolean := false;
    written bigint;
BEGIN
    SELECT * INTO s FROM sessions
        WHERE sessions.tenant = p_tenant AND sessions.session_id = p_session_id;
    IF NOT FOUND THEN
        IF p_create_user IS NULL THEN
            RETURN QUERY SELECT 'not_found', NULL::bigint, NULL::bigint, NULL::boolean, NULL::uuid, NULL::bytea;
            RETURN;
        END IF;
        -- Only a key made for this append (`p_key` is given for no other) may seal a new
        -- session: a remembered key may be one destroyed with an erased session of this id.
        IF p_key IS NULL OR p_expected <> 0 THEN
            RETURN QUERY SELECT 'retry', NULL::bigint, NULL::bigint, NULL::boolean, NULL::uuid, NULL::bytea;
            RETURN;
        END IF;
        INSERT INTO sessions (tenant, session_id, user_id, agent_id, flow_id, metadata,
                              created_at, updated_at, message_count, last_role, key_id)
            VALUES (p_tenant, p_session_id, p_create_user, p_create_agent, p_create_flow,
                    p_create_metadata, p_now, p_now, n, p_roles[n], p_key_id)
            ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written = 0 THEN
            -- A concurrent append created it first: seal again for that session.
            RETURN QUERY SELECT 'retry', NULL::bigint, NULL::bigint, NULL::boolean, NULL::uuid, NULL::bytea;
            RETURN;
        END IF;
        INSERT INTO data_keys (tenant, key_id, key) VALUES (p_tenant, p_key_id, p_key);
        created := true;
        first := 0;
    ELSE
        IF p_user IS NOT NULL AND s.user_id <> p_user THEN
            -- Another user's session: unknown to this caller, and its id taken.
            RETURN QUERY SELECT CASE WHEN p_create_user IS NULL THEN 'not_found' ELSE 'taken' END,
                NULL::bigint, NULL::bigint, NULL::boolean, NULL::uuid, NULL::bytea;
            RETURN;
        END IF;
        IF p_create_user IS NOT NULL
           AND (s.user_id <> p_create_user OR s.agent_id <> p_create_agent) THEN
            RETURN QUERY SELECT 'taken', NULL::bigint, NULL::bigint, NULL::boolean, NULL::uuid, NULL::bytea;
            RETURN;
        END IF;
        -- Digests are compared only under the session's current key (they are keyed with
        -- it); with another key the update below answers the current one, and the retry
        -- comes back here.
        IF p_idempotency_key IS NOT NULL AND p_key_id IS NOT DISTINCT FROM s.key_id THEN
            SELECT * INTO previous FROM idempotency
                WHERE idempotency.tenant = p_tenant AND idempotency.session_id = p_session_id
                  AND idempotency.key = p_idempotency_key;
            IF FOUND THEN
                IF previous.digest IS NOT NULL AND previous.digest <> p_digest THEN
                    RETURN QUERY SELECT 'idempotency_conflict', NULL::bigint, NULL::bigint,
                        NULL::boolean, NULL::uuid, NULL::bytea;
                ELSE
                    RETURN QUERY SELECT 'replayed', previous.first_index, previous.count,
                        previous.created_session, NULL::uuid, NULL::bytea;
                END IF;
                RETURN;
            END IF;
        END IF;
        IF s.message_count + n > p_max_messages THEN
            RETURN QUERY SELECT 'too_many', NULL::bigint, NULL::bigint, NULL::boolean, NULL::uuid, NULL::bytea;
            RETURN;
        END IF;
        UPDATE sessions
            SET message_count = sessions.message_count + n,
                -- Last activity never moves back, even if a clock does.
                updated_at = greatest(sessions.updated_at, p_now),
                last_role = p_roles[n]
            WHERE sessions.tenant = p_tenant AND sessions.session_id = p_session_id
              AND sessions.message_count = p_expected AND sessions.key_id = p_key_id
            RETURNING sessions.message_count - n INTO first;
        IF NOT FOUND THEN
            -- Sealed for another index or key (a concurrent append moved the count, or the
            -- caller did not know the session yet): answer the current ones. Under READ
            -- COMMITTED this statement sees what the concurrent append committed.
            RETURN QUERY SELECT 'retry', sessions.message_count, NULL::bigint, NULL::boolean,
                    sessions.key_id, data_keys.key
                FROM sessions JOIN data_keys
                    ON data_keys.tenant = sessions.tenant AND data_keys.key_id = sessions.key_id
                WHERE sessions.tenant = p_tenant AND sessions.session_id = p_session_id;
            IF NOT FOUND THEN
                -- Deleted in between: the retry finds it missing, or creates it anew.
                RETURN QUERY SELECT 'retry', NULL::bigint, NULL::bigint, NULL::boolean,
                    NULL::uuid, NULL::bytea;
            END IF;
            RETURN;
        END IF;
    END IF;

    INSERT INTO messages (tenant, session_id, idx, role, content, metadata, "timestamp", token_count)
        SELECT p_tenant, p_session_id, first + m.ord - 1, m.role, m.content, m.metadata, m.ts, m.tokens
        FROM unnest(p_roles, p_contents, p_metadata, p_timestamps, p_token_counts)
            WITH ORDINALITY AS m(role, content, metadata, ts, tokens, ord);
    IF p_idempotency_key IS NOT NULL THEN
        INSERT INTO idempotency (tenant, session_id, key, digest, first_index, count, created_session)
            VALUES (p_tenant, p_session_id, p_idempotency_key, p_digest, first, n, created)
            ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written = 0 THEN
            -- A concurrent append under the same key committed after the check above: undo
            -- this one, whose retry then replays that one.
            RAISE EXCEPTION 'idempotency key used concurrently' USING ERRCODE = 'ML001';
        END IF;
    END IF;
    INSERT INTO feed (tenant, session_id, first_index, count)
        VALUES (p_tenant, p_session_id, first, n);
    RETURN QUERY SELECT 'appended', first, n, created, NULL::uuid, NULL::bytea;
END
$fn$;
