-- Schema v3: what belongs to a tenant rather than to a session (settings documents, the
-- conversation retention rule) and the API keys.

-- The data key that seals a tenant's settings documents, one per tenant, created with its
-- first document (its row in `data_keys` belongs to the same tenant).
--
-- Why one key per tenant and not per document: no erasure of the redb store removes a settings
-- document (erasing a user, a session or messages, and the retention purge, all leave them:
-- they are the tenant admin's configuration, not an end user's conversation). The only erasure
-- that could ever have to make them unrecoverable is of the whole tenant, and it destroys
-- exactly this one key. Until then a replaced or removed document stays readable, from dead
-- tuples and WAL, to whoever has the tenant's key, as it stays in the redb file's free pages.
CREATE TABLE tenant_keys (
    tenant text NOT NULL,
    key_id uuid NOT NULL,
    PRIMARY KEY (tenant)
);

-- The settings document of a tenant (scope `*`) or of one of its agents (scope `a/<agent_id>`):
-- the caller's JSON object, sealed under the key `key_id` (the tenant's, see above) for its
-- tenant and scope.
CREATE TABLE settings (
    tenant text NOT NULL,
    scope text NOT NULL,
    key_id uuid NOT NULL,
    document bytea NOT NULL,
    PRIMARY KEY (tenant, scope)
);

-- A tenant's conversation retention in days, and when it last ran (microseconds, 0 if never).
-- Numbers only, nobody's text: not sealed.
CREATE TABLE retention (
    tenant text NOT NULL,
    days bigint NOT NULL,
    last_run bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant)
);

-- API keys: never the key, only `digest`, the SHA-256 of the whole key (see
-- memlayer_store::keys for why a fast hash is enough). `tenant` is `*` for operator keys;
-- `role` is `KeyRole` as numbered in src/keys.rs; times are microseconds.
--
-- The prefix is the key's public name and is unique across tenants (a key is found by its
-- prefix alone): authenticating is one lookup in `api_keys_by_prefix`, and the digest is
-- compared in memlayer, in constant time, not in SQL.
--
-- Names are not sealed. They are labels operators and tenant admins give their own programs
-- ("billing backend"), not an end user's text; no erasure of the redb store removes a key or
-- its name (keys are only ever revoked), so no data key could be destroyed for them and
-- sealing would protect nothing an erasure promises, while every authentication, which returns
-- the name, would pay a join and a decryption for it.
--
-- No CHECK constraints: a violated one (like a NOT NULL) makes the server's error show the
-- whole row ("Failing row contains ..."), digest included, and errors end up in logs. The Rust
-- side checks every value before it is written, as the redb store does.
CREATE TABLE api_keys (
    tenant text NOT NULL,
    prefix text NOT NULL,
    role smallint NOT NULL,
    user_id text,
    name text,
    digest bytea NOT NULL,
    created_at bigint NOT NULL,
    expires_at bigint,
    revoked_at bigint,
    PRIMARY KEY (tenant, prefix)
);
CREATE UNIQUE INDEX api_keys_by_prefix ON api_keys (prefix);

-- ANALYZE would copy sample digests into `pg_statistic`; nothing filters or sorts on them.
ALTER TABLE api_keys ALTER COLUMN digest SET STATISTICS 0;
