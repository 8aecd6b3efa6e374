-- Schema v9: the nodes following the shared embedding outbox (src/followers.rs), so that an
-- erasure's receipt waits until every live node took what it erased out of its indexes.
--
-- Each node records, as it follows, the outbox position it applied everything up to and
-- when it last did so by the database's clock. A node is live while that record is recent;
-- one whose record lapsed (it died, froze or lost the database) is not waited for, and
-- catches up before it reports ready again. `node_id` is a node's random name (the
-- `node-id` file of its data directory): no tenant's data.
CREATE TABLE followers (
    node_id text PRIMARY KEY,
    followed bigint NOT NULL,
    seen_at timestamptz NOT NULL
);
