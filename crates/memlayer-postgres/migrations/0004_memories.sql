-- Schema v4: long-term memories, session memories and episodes.
--
-- Every text of these (a memory's text, tags, source time, history and vector; a session
-- memory's summary; an episode's description, reflection, lesson) is sealed in `body` under a
-- data key of its own row, so that each erasure the redb store can do destroys exactly one
-- key per erased row:
--   * a memory has one key for its text and its whole history. `delete_memory`, and a
--     `forget_citation` of its source, destroy it; a `forget_citation` that only takes
--     replaced texts out of its history seals the kept history under a new key and destroys
--     the old one. An update that stops citing a message it cited before (a replaced text
--     dropped from the bounded history, say) also moves the memory to a new key, so no text
--     of that message stays readable under a key its later erasure would not destroy;
--   * an episode has one key (`delete_episode`, `delete_user_episodes`);
--   * a session memory has one key (`drop_session_memories`); a save that no longer lists
--     every session the previous text was merged from moves it to a new key likewise.
-- Identifiers (user, agent, memory key, task type, session ids cited) stay plain, as
-- session ids and user ids do in `sessions`: the statements that check and list need them.

-- `id` is random below 2^53 and unique in the whole store (as in redb: `memories_after`
-- pages every tenant's memories by it). `seq` is the store-wide creation order that listings
-- follow, as redb's memory sequence: an update keeps it.
CREATE TABLE memories (
    tenant text NOT NULL,
    id bigint NOT NULL CHECK (id > 0),
    seq bigint GENERATED ALWAYS AS IDENTITY,
    user_id text NOT NULL,
    -- NULL: every agent of the user.
    agent_id text,
    -- The name a keyed put gave it; never changes.
    key text,
    revision bigint NOT NULL CHECK (revision > 0),
    key_id uuid NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE UNIQUE INDEX memories_by_id ON memories (id);
CREATE INDEX memories_by_user ON memories (tenant, user_id, seq);
-- One memory per key in a user and agent scope; '' (no valid agent id) stands for every
-- agent, so the NULL agent's keys are unique too.
CREATE UNIQUE INDEX memory_keys ON memories (tenant, user_id, coalesce(agent_id, ''), key)
    WHERE key IS NOT NULL;

-- The messages a memory cites: its source and the sources of its replaced texts.
CREATE TABLE memory_citations (
    tenant text NOT NULL,
    session_id text NOT NULL,
    id bigint NOT NULL,
    idx bigint NOT NULL,
    PRIMARY KEY (tenant, session_id, id, idx),
    FOREIGN KEY (tenant, id) REFERENCES memories ON DELETE CASCADE
);
CREATE INDEX memory_citations_by_memory ON memory_citations (tenant, id);

-- One rolling summary per user and agent, with the sessions merged into it.
CREATE TABLE session_memories (
    tenant text NOT NULL,
    user_id text NOT NULL,
    agent_id text NOT NULL,
    sessions text[] NOT NULL,
    key_id uuid NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (tenant, user_id, agent_id)
);

-- Episodes: `id` and `seq` as for memories.
CREATE TABLE episodes (
    tenant text NOT NULL,
    id bigint NOT NULL CHECK (id > 0),
    seq bigint GENERATED ALWAYS AS IDENTITY,
    user_id text NOT NULL,
    agent_id text,
    task_type text NOT NULL,
    source_session text,
    key_id uuid NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE UNIQUE INDEX episodes_by_id ON episodes (id);
CREATE INDEX episodes_by_user ON episodes (tenant, user_id, seq);
CREATE INDEX episodes_by_task ON episodes (tenant, user_id, task_type, seq);
