-- Schema v11: which node claimed an outbox entry for embedding (src/embeddings.rs).
--
-- A claim is a lease (`claimed_until`) so that a dead node's entries go to another node
-- once it runs out. A node restarted under the same name (the `node-id` file of its data
-- directory) is the one that claimed them: it takes them back at once instead of waiting
-- out its own lease, during which the entries, and every entry after them, stayed out of
-- every node's indexes. NULL for a store that runs under no name.
ALTER TABLE embedding_outbox
    ADD COLUMN claimed_by text;
