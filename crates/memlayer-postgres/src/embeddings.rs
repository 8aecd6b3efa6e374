//! The embedding pipeline's side (`memlayer_store::EmbeddingFeed` in the redb store): the
//! appends waiting to be embedded, the vectors the pipeline stores, the counter that tells an
//! index snapshot whether it is still exact, and the look-ups by surrogate key the indexes
//! need to rebuild themselves and to turn a hit back into a message.
//!
//! # Positions
//!
//! Every append's `feed` row (src/feed.rs) queues it in `embedding_outbox`, by a trigger, in
//! the appending transaction. The redb store numbers its outbox entries from one counter,
//! which commits in order because redb has one writer. PostgreSQL commits sequence values out
//! of order, so a counter (or an identity column) would let the pipeline apply entry 8, say
//! it has applied everything up to 8, and only then see entry 7 commit. The pipeline compares
//! the `seq` of the last entry it applied against [`PgStore::outbox_head`] for
//! read-your-writes (memlayer-index `recall/query.rs`, `recall/pipeline.rs`), so `seq` must
//! be such a position, not just a name.
//!
//! A row's position is therefore its transaction id (`xid8`) and its ordinal among that
//! transaction's rows: `seq = xid << 24 | ord`. [`PgStore::embedded_after`] delivers only
//! rows of transactions below the oldest one still running (`pg_snapshot_xmin`, as the change
//! feed does), in position order. Below that horizon every transaction has ended, so no row
//! can appear later at a position below one delivered: once the pipeline applied everything
//! up to a position, it has applied every row at or below it.
//!
//! [`PgStore::outbox_head`] is the highest position of a committed row still in the outbox, or
//! 0 when none is. Every append committed before the call is at or below it, or its row was
//! pruned (below). Unlike the redb head, this one can move back when rows are pruned; it is
//! reachable: the pipeline catches up with it once the transactions below it have ended.
//!
//! The costs: an append is indexed (and a read-your-writes wait ends) only once every
//! transaction that started writing before it has ended, so a long transaction anywhere in the
//! cluster holds the pipeline back ([`PgStore::embedded_after`] waits up to a second for
//! such transactions when committed entries are not yet deliverable, then answers with what
//! is); and positions need `xid < 2^40` (a trillion transactions)
//! and fewer than 2^24 rows per transaction (a reset queues one row per session), refused
//! beyond.
//!
//! # Several nodes
//!
//! Every node on the database indexes every append, but each is embedded once. The outbox is
//! shared work and a shared log:
//! - [`PgStore::pending_embeddings`] claims the oldest rows nobody is embedding (a lease,
//!   `claimed_until`, by the database's clock; `SKIP LOCKED`, so two nodes never wait for each
//!   other) and [`PgStore::store_embeddings`] stores their vectors and marks them
//!   `embedded_at`, in one transaction. A node that dies with a claim leaves its rows to
//!   another once the lease runs out, or to itself at once when it comes back under its
//!   name (`claimed_by`, [`PgStore::for_node`]): until then those rows, and every row after
//!   them, stay out of every node's indexes.
//! - [`PgStore::embedded_after`] is how a node's indexes follow: the rows after its position,
//!   below the horizon, in position order, with their messages and stored vectors, stopping
//!   before the first row not embedded yet. The node indexes them (its own as well: adding is
//!   idempotent) and its position, the pipeline's progress, is the last row applied. So
//!   [`PgStore::outbox_head`] read on one node is a read-your-writes bound on every node.
//! - Erasures are entries too: triggers on `sessions` and `messages` deletes write a removal
//!   row (done when written, so never claimed) in the erasing transaction, and every node
//!   following past it takes the session or message out of its indexes. Rows hold surrogate
//!   keys and indices, never content. Long-term memories' writes and deletions are entries
//!   too (migration 10: tenant, user, memory id and revision), so that the nodes' resident
//!   memory partitions follow them.
//! - A node starts following at [`PgStore::embedded_through`], read before it loads the
//!   stored vectors: every row at or below it was embedded before the load read the vectors.
//! - Embedded rows are pruned after a retention (ten minutes), and only below the horizon
//!   and below the first row still waiting, so a starting node's position is above every row
//!   pruned. `embedding_state.pruned_through` keeps the highest position pruned: a node whose
//!   position is below it missed rows and rebuilds its indexes.
//!
//! # Vectors
//!
//! Vectors are derived from content, so they are sealed like it: under the session's data key,
//! bound to (tenant, session, index) ([`Field::Vector`]). Deleting the session destroys the
//! key and cascades to the rows; erasing a message cascades to its vector. Each deletion of
//! vectors, by whoever does it, raises `vectors_version` in its transaction (a deferred
//! trigger, see migrations/0005_feed.sql).

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use memlayer_store::{
    Access, EmbeddedAppend, EmbeddingModel, FollowedFeed, MAX_MESSAGES_PER_SESSION, MemoryChange,
    Message, MessageKey, PendingEmbedding, Removal, Session, SessionRef, StoreError, StoredVector,
    Timestamp,
};
use tokio_postgres::{IsolationLevel, Row};

use crate::seal::{Field, Place};
use crate::sessions::{
    SESSION_KEY_COLUMNS, WITH_KEY, key_from_row, message_from_row, open_content, role_from_code,
    session_from_row, unsigned,
};
use crate::{PgStore, PostgresError, Result};

/// Bits of a position for the ordinal within a transaction.
const ORD_BITS: u32 = 24;
/// Positions hold transaction ids below this.
const MAX_XID: i64 = 1 << (64 - ORD_BITS);
/// How long [`PgStore::embedded_after`] waits at most for the next entry when it is being
/// embedded, or committed but above the horizon.
const HORIZON_WAIT: Duration = Duration::from_secs(1);
/// How long a node's claim on entries ([`PgStore::pending_embeddings`]) keeps other nodes off
/// them: far longer than a batch takes to embed; a dead node's entries wait this long.
const CLAIM: Duration = Duration::from_secs(30);
/// How long an embedded entry stays for other nodes to follow: a node that falls further
/// behind misses entries and must rebuild its indexes.
const RETENTION: Duration = Duration::from_secs(600);
/// How often a store prunes embedded entries at most.
const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// Surrogate keys a [`MessageKey`] can hold: the bits its index leaves.
const MAX_SID: u64 = u64::MAX / MAX_MESSAGES_PER_SESSION;

/// The columns of `messages m` that [`message_from_row`] and [`open_content`] read.
const MESSAGE_COLUMNS: &str =
    "m.idx, m.role, m.content, m.metadata, m.\"timestamp\", m.token_count";

impl PgStore {
    /// Claims the oldest appends no other node is embedding, whole, in position order, until at
    /// least `max_messages` messages are collected (at least one entry if any waits), and
    /// answers them to be embedded (see "Several nodes" in the module documentation). An entry
    /// of a session deleted since has no session and no messages; messages erased since are
    /// left out.
    pub async fn pending_embeddings(&self, max_messages: usize) -> Result<Vec<PendingEmbedding>> {
        let wanted = i64::try_from(max_messages.max(1)).unwrap_or(i64::MAX);
        let mut client = self.connection().await?;
        let txn = client.transaction().await?;
        // Entries another node is claiming right now are skipped, not waited for; the rows
        // locked but not claimed (past the messages wanted) are free again at the commit.
        let mut entries = txn
            .query(
                &format!(
                    "WITH candidates AS (
                         SELECT xid, ord, count FROM embedding_outbox
                         WHERE embedded_at IS NULL
                           AND (claimed_until IS NULL OR claimed_until < clock_timestamp()
                                OR claimed_by = $2)
                         ORDER BY xid, ord
                         LIMIT $1
                         FOR UPDATE SKIP LOCKED
                     ), taken AS (
                         SELECT xid, ord,
                                sum(count) OVER (ORDER BY xid, ord) - count AS before
                         FROM candidates
                     )
                     UPDATE embedding_outbox o
                     SET claimed_until = clock_timestamp() + interval '{} seconds',
                         claimed_by = $2
                     FROM taken
                     WHERE o.xid = taken.xid AND o.ord = taken.ord AND taken.before < $1
                     RETURNING o.xid::text::bigint AS xid, o.ord, o.sid, o.first_index, o.count",
                    CLAIM.as_secs()
                ),
                &[&wanted, &self.node],
            )
            .await?;
        entries.sort_by_key(|entry| (entry.get::<_, i64>("xid"), entry.get::<_, i64>("ord")));
        let pending = appends(&txn, &entries).await?;
        txn.commit().await?;
        Ok(pending)
    }

    /// The entries after position `after`, in position order below the horizon, at most
    /// `max_entries`, stopping before the first one not embedded yet: appends, whoever
    /// embedded them, with their messages and stored vectors, and removals (see "Several
    /// nodes" in the module documentation). One snapshot.
    pub async fn embedded_after(&self, after: u64, max_entries: usize) -> Result<FollowedFeed> {
        let wanted = i64::try_from(max_entries.max(1)).unwrap_or(i64::MAX);
        let (after_xid, after_ord) = place_of(after).unwrap_or((MAX_XID, 0));
        let after_xid = after_xid.to_string();
        let started = Instant::now();
        let mut client = self.connection().await?;
        let (txn, entries) = loop {
            // One snapshot for the horizon, the entries, their messages and vectors.
            let txn = client
                .build_transaction()
                .isolation_level(IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .await?;
            let mut entries = txn
                .query(
                    "SELECT xid::text::bigint AS xid, ord, sid, first_index, count, removal,
                            tenant, user_id, memory_id, revision,
                            embedded_at IS NOT NULL AS embedded
                     FROM embedding_outbox
                     WHERE (xid, ord) > ($1::text::xid8, $2::bigint)
                       AND xid < pg_snapshot_xmin(pg_current_snapshot())
                     ORDER BY xid, ord
                     LIMIT $3",
                    &[&after_xid, &after_ord, &wanted],
                )
                .await?;
            if let Some(waiting) = entries
                .iter()
                .position(|entry| !entry.get::<_, bool>("embedded"))
            {
                entries.truncate(waiting);
            }
            if !entries.is_empty() {
                break (txn, entries);
            }
            // The next entry is being embedded, or committed entries wait above the horizon
            // for older transactions, mostly ones about to end: wait a little for them rather
            // than leave them to a later call.
            let waiting: bool = txn
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM embedding_outbox
                                    WHERE (xid, ord) > ($1::text::xid8, $2::bigint))",
                    &[&after_xid, &after_ord],
                )
                .await?
                .get(0);
            if !waiting || started.elapsed() >= HORIZON_WAIT {
                break (txn, entries);
            }
            txn.commit().await?;
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let pruned_through: i64 = txn
            .query_one("SELECT pruned_through FROM embedding_state", &[])
            .await?
            .get(0);
        let through = match entries.last() {
            Some(last) => Some(position(last.get("xid"), last.get("ord"))?),
            None => None,
        };
        let (removed, added): (Vec<Row>, Vec<Row>) = entries
            .into_iter()
            .partition(|entry| entry.get::<_, Option<&str>>("removal").is_some());
        let pending = appends(&txn, &added).await?;
        let vectors = stored_vectors(&txn, &pending).await?;
        txn.commit().await?;
        let mut vectors: HashMap<MessageKey, Vec<f32>> = vectors.into_iter().collect();
        let appends = pending
            .into_iter()
            .map(|append| {
                let vectors = append
                    .messages
                    .iter()
                    .filter_map(|(key, _)| Some((*key, vectors.remove(key)?)))
                    .collect();
                EmbeddedAppend { append, vectors }
            })
            .collect();
        let removals = removed.iter().map(removal).collect::<Result<_>>()?;
        Ok(FollowedFeed {
            appends,
            removals,
            through,
            missed: unsigned(pruned_through)? > after,
        })
    }

    /// How many appends wait to be embedded (a gauge), those being embedded included.
    pub async fn pending_embedding_count(&self) -> Result<u64> {
        let client = self.connection().await?;
        let row = client
            .query_one(
                "SELECT count(*) FROM embedding_outbox WHERE embedded_at IS NULL",
                &[],
            )
            .await?;
        unsigned(row.get(0))
    }

    /// Stores the vectors `model` made, sealed, and removes the entries `done` (positions
    /// [`Self::pending_embeddings`] gave), in one transaction. Vectors of messages deleted in
    /// the meantime are dropped.
    ///
    /// Refuses a vector whose size is not the model's ([`StoreError::InvalidInput`]), and
    /// any vector while the store holds vectors of another model ([`StoreError::Conflict`]),
    /// as the redb store does; nothing is written then.
    pub async fn store_embeddings(
        &self,
        model: EmbeddingModel,
        done: Vec<u64>,
        mut vectors: Vec<(MessageKey, Vec<f32>)>,
    ) -> Result<()> {
        model.check_vectors(&vectors)?;
        // In key order, so that two stores lock the rows they share in the same order.
        vectors.sort_by_key(|(key, _)| *key);
        vectors.dedup_by_key(|(key, _)| *key);
        let (done_xids, done_ords): (Vec<i64>, Vec<i64>) =
            done.iter().filter_map(|&seq| place_of(seq)).unzip();
        let mut client = self.connection().await?;
        let txn = client.transaction().await?;
        // Locks, in this order, like every other writer of these tables: the sessions (so a
        // re-key, `rekey`, waits, or has committed and the key read below is the new one),
        // the messages (so a concurrent deletion waits, or has happened and the message is
        // skipped), the vectors, the outbox rows, and last the state row.
        if !vectors.is_empty() {
            let sids: Vec<i64> = vectors
                .iter()
                .map(|(key, _)| i64::try_from(key.session()).unwrap_or(i64::MAX))
                .collect();
            txn.execute(
                "SELECT 1 FROM sessions WHERE sid = ANY($1) ORDER BY sid FOR KEY SHARE",
                &[&sids],
            )
            .await?;
            let indices: Vec<i64> = vectors
                .iter()
                .map(|(key, _)| i64::try_from(key.index()).unwrap_or(i64::MAX))
                .collect();
            let rows = txn
                .query(
                    "SELECT w.n, s.tenant, s.session_id, s.key_id, k.key
                     FROM unnest($1::bigint[], $2::bigint[]) WITH ORDINALITY AS w(sid, idx, n)
                     JOIN sessions s ON s.sid = w.sid
                     JOIN data_keys k ON k.tenant = s.tenant AND k.key_id = s.key_id
                     JOIN messages m
                       ON m.tenant = s.tenant AND m.session_id = s.session_id AND m.idx = w.idx
                     ORDER BY w.n
                     FOR KEY SHARE OF m",
                    &[&sids, &indices],
                )
                .await?;
            let mut tenants = Vec::with_capacity(rows.len());
            let mut session_ids = Vec::with_capacity(rows.len());
            let (mut kept_sids, mut kept_indices) = (Vec::new(), Vec::new());
            let mut sealed = Vec::with_capacity(rows.len());
            for row in &rows {
                let n = usize::try_from(row.get::<_, i64>("n") - 1).unwrap_or(usize::MAX);
                let (key, components) = vectors.get(n).ok_or_else(|| PostgresError::Corrupted {
                    what: "vector",
                    detail: format!("no vector {n}"),
                })?;
                let tenant: String = row.get("tenant");
                let session_id: String = row.get("session_id");
                let data_key = key_from_row(row)?;
                sealed.push(data_key.seal(
                    vector_place(&tenant, &session_id, key.index()),
                    &components_to_bytes(components),
                )?);
                tenants.push(tenant);
                session_ids.push(session_id);
                kept_sids.push(sids[n]);
                kept_indices.push(indices[n]);
            }
            txn.execute(
                "INSERT INTO embedding_vectors (tenant, session_id, idx, sid, components)
                 SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[],
                                      $5::bytea[])
                 ON CONFLICT (tenant, session_id, idx)
                 DO UPDATE SET components = EXCLUDED.components, sid = EXCLUDED.sid",
                &[&tenants, &session_ids, &kept_indices, &kept_sids, &sealed],
            )
            .await?;
        }
        if !done_xids.is_empty() {
            // Kept, for the other nodes to follow, until pruned.
            txn.execute(
                "UPDATE embedding_outbox o
                 SET embedded_at = clock_timestamp(), claimed_until = NULL, claimed_by = NULL
                 FROM unnest($1::bigint[], $2::bigint[]) AS d(xid, ord)
                 WHERE o.xid = d.xid::text::xid8 AND o.ord = d.ord",
                &[&done_xids, &done_ords],
            )
            .await?;
        }
        let dimension = i32::try_from(model.dimension).map_err(|_| StoreError::InvalidInput {
            field: "model",
            reason: "dimension out of range".into(),
        })?;
        // The model check reads the latest committed state row, under its lock: a concurrent
        // store of another model, or a reset, is ordered before or after this one.
        txn.execute("SELECT memlayer_bump_vectors_version()", &[])
            .await?;
        let known = txn
            .query_one(
                "UPDATE embedding_state
                 SET model_name = coalesce(model_name, $1),
                     model_sha256 = coalesce(model_sha256, $2),
                     model_dimension = coalesce(model_dimension, $3)
                 RETURNING model_name, model_sha256, model_dimension",
                &[&model.name, &model.sha256, &dimension],
            )
            .await?;
        let (known_name, known_sha256, known_dimension): (String, String, i32) =
            (known.get(0), known.get(1), known.get(2));
        if known_sha256 != model.sha256 || known_dimension != dimension {
            // Dropping the transaction rolls back the vectors written above.
            return Err(StoreError::Conflict(format!(
                "the store holds vectors of model {known_name} ({known_sha256}), not {} ({}); \
                 run `memlayer reindex` to embed every message again with the new model",
                model.name, model.sha256
            ))
            .into());
        }
        txn.commit().await?;
        drop(client);
        self.prune_feed().await
    }

    /// Deletes the entries embedded longer than [`RETENTION`] ago, at most once every
    /// [`PRUNE_EVERY`] from this store, and raises `pruned_through` to the highest position
    /// deleted, in one transaction. Only entries below both the horizon and the first entry
    /// still waiting go: a node starting later starts following above every one of them
    /// ([`Self::embedded_through`]), so only a node that fell behind by the retention can find
    /// an entry it did not follow pruned.
    pub(crate) async fn prune_feed(&self) -> Result<()> {
        {
            let mut pruned_at = self
                .feed_pruned_at
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if pruned_at.is_some_and(|at| at.elapsed() < PRUNE_EVERY) {
                return Ok(());
            }
            *pruned_at = Some(Instant::now());
        }
        self.forget_gone_followers().await?;
        let mut client = self.connection().await?;
        let txn = client.transaction().await?;
        // Rows locked by another transaction (a session's deletion cascading) are left for a
        // later pass rather than waited for.
        let pruned = txn
            .query_opt(
                &format!(
                    "WITH first_waiting AS (
                         SELECT xid, ord FROM embedding_outbox WHERE embedded_at IS NULL
                         ORDER BY xid, ord LIMIT 1
                     ), old AS (
                         SELECT xid, ord FROM embedding_outbox o
                         WHERE o.embedded_at < clock_timestamp() - interval '{} seconds'
                           AND o.xid < pg_snapshot_xmin(pg_current_snapshot())
                           AND NOT EXISTS (SELECT 1 FROM first_waiting w
                                           WHERE (o.xid, o.ord) >= (w.xid, w.ord))
                         FOR UPDATE SKIP LOCKED
                     ), gone AS (
                         DELETE FROM embedding_outbox o USING old
                         WHERE o.xid = old.xid AND o.ord = old.ord
                         RETURNING o.xid, o.ord
                     )
                     SELECT xid::text::bigint AS xid, ord FROM gone
                     ORDER BY xid DESC, ord DESC LIMIT 1",
                    RETENTION.as_secs()
                ),
                &[],
            )
            .await?;
        let Some(highest) = pruned else {
            return Ok(txn.commit().await?);
        };
        let highest = position(highest.get("xid"), highest.get("ord"))?;
        txn.execute(
            "UPDATE embedding_state SET pruned_through = greatest(pruned_through, $1)",
            &[&i64::try_from(highest).unwrap_or(i64::MAX)],
        )
        .await?;
        Ok(txn.commit().await?)
    }

    /// The model the stored vectors were made with, once any was stored (until a reset).
    pub async fn vector_model(&self) -> Result<Option<EmbeddingModel>> {
        let client = self.connection().await?;
        let row = client
            .query_one(
                "SELECT model_name, model_sha256, model_dimension FROM embedding_state",
                &[],
            )
            .await?;
        let (Some(name), Some(sha256), Some(dimension)) = (
            row.get::<_, Option<String>>(0),
            row.get::<_, Option<String>>(1),
            row.get::<_, Option<i32>>(2),
        ) else {
            return Ok(None);
        };
        Ok(Some(EmbeddingModel {
            name,
            sha256,
            dimension: u32::try_from(dimension).map_err(|_| PostgresError::Corrupted {
                what: "embedding state",
                detail: format!("dimension {dimension}"),
            })?,
        }))
    }

    /// Up to `limit` stored vectors in key order, after `after`: the pages an index rebuild
    /// reads. One statement, so one snapshot.
    pub async fn vectors(
        &self,
        after: Option<MessageKey>,
        limit: usize,
    ) -> Result<Vec<StoredVector>> {
        let (sid, index) = cursor(after);
        let client = self.connection().await?;
        let rows = client
            .query(
                "SELECT v.sid, v.idx, v.components, m.role, m.\"timestamp\",
                        s.tenant, s.session_id, s.key_id, k.key
                 FROM embedding_vectors v
                 JOIN messages m
                   ON m.tenant = v.tenant AND m.session_id = v.session_id AND m.idx = v.idx
                 JOIN sessions s ON s.tenant = v.tenant AND s.session_id = v.session_id
                 JOIN data_keys k ON k.tenant = s.tenant AND k.key_id = s.key_id
                 WHERE (v.sid, v.idx) > ($1::bigint, $2::bigint)
                 ORDER BY v.sid, v.idx
                 LIMIT $3",
                &[&sid, &index, &bound(limit)],
            )
            .await?;
        rows.iter()
            .map(|row| {
                let (key, components) = vector_from_row(row)?;
                Ok(StoredVector {
                    key,
                    role: role_from_code(row.get("role"))?,
                    timestamp: Timestamp::from_micros(unsigned(row.get("timestamp"))?),
                    components,
                })
            })
            .collect()
    }

    /// Where the session with surrogate key `sid` lives, or `None` if it was deleted (or
    /// never existed).
    pub async fn session_ref(&self, sid: u64) -> Result<Option<SessionRef>> {
        let Ok(sid) = i64::try_from(sid) else {
            return Ok(None);
        };
        let client = self.connection().await?;
        let row = client
            .query_opt(
                "SELECT tenant, session_id FROM sessions WHERE sid = $1",
                &[&sid],
            )
            .await?;
        Ok(row.map(|row| SessionRef {
            tenant: row.get("tenant"),
            session_id: row.get("session_id"),
        }))
    }

    /// Which of `sids` belong to no session any more, read in one statement.
    pub async fn deleted_sessions(&self, sids: &BTreeSet<u64>) -> Result<BTreeSet<u64>> {
        let asked: Vec<i64> = sids
            .iter()
            .filter_map(|&sid| i64::try_from(sid).ok())
            .collect();
        let client = self.connection().await?;
        let rows = client
            .query("SELECT sid FROM sessions WHERE sid = ANY($1)", &[&asked])
            .await?;
        let mut deleted = sids.clone();
        for row in &rows {
            deleted.remove(&unsigned(row.get("sid"))?);
        }
        Ok(deleted)
    }

    /// The session with surrogate key `sid` and where it lives, or `None` if it was deleted.
    pub async fn session_by_key(&self, sid: u64) -> Result<Option<(SessionRef, Session)>> {
        let Ok(sid) = i64::try_from(sid) else {
            return Ok(None);
        };
        let client = self.connection().await?;
        let row = client
            .query_opt(
                &format!("SELECT s.tenant, {SESSION_KEY_COLUMNS} FROM {WITH_KEY} WHERE s.sid = $1"),
                &[&sid],
            )
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let tenant: String = row.get("tenant");
        let session = session_from_row(&row, &tenant, &key_from_row(&row)?)?;
        Ok(Some((
            SessionRef {
                tenant,
                session_id: session.id.clone(),
            },
            session,
        )))
    }

    /// The surrogate key of the session `access` reaches under `session_id`: another user's
    /// session has none for a user-scoped access.
    pub async fn session_key(&self, access: &Access, session_id: &str) -> Result<Option<u64>> {
        access.check_session(session_id)?;
        let client = self.connection().await?;
        let row = client
            .query_opt(
                "SELECT sid FROM sessions
                 WHERE tenant = $1 AND session_id = $2 AND ($3::text IS NULL OR user_id = $3)",
                &[&access.tenant(), &session_id, &access.user()],
            )
            .await?;
        row.map(|row| {
            let sid = unsigned(row.get("sid"))?;
            checked_sid(sid)
        })
        .transpose()
    }

    /// The highest position of a committed entry still in the outbox, or 0 when none is:
    /// every append committed before the call is at or below it, or was pruned (see the
    /// module documentation).
    pub async fn outbox_head(&self) -> Result<u64> {
        let client = self.connection().await?;
        let row = client
            .query_opt(
                "SELECT xid::text::bigint AS xid, ord FROM embedding_outbox
                 ORDER BY xid DESC, ord DESC
                 LIMIT 1",
                &[],
            )
            .await?;
        row.map_or(Ok(0), |row| position(row.get("xid"), row.get("ord")))
    }

    /// A position at or below which every entry is embedded, its vectors stored (see the
    /// module documentation): below the first entry still waiting and below the horizon. A
    /// node reads it before it loads the stored vectors and follows the outbox from there.
    pub async fn embedded_through(&self) -> Result<u64> {
        let client = self.connection().await?;
        let row = client
            .query_one(
                "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS horizon,
                        w.xid, w.ord
                 FROM (SELECT 1) AS one
                 LEFT JOIN LATERAL (
                     SELECT xid::text::bigint AS xid, ord FROM embedding_outbox
                     WHERE embedded_at IS NULL
                     ORDER BY xid, ord LIMIT 1
                 ) w ON true",
                &[],
            )
            .await?;
        let horizon = position(row.get("horizon"), 0)?;
        let first_waiting = match row.get::<_, Option<i64>>("xid") {
            Some(xid) => position(xid, row.get("ord"))?,
            None => horizon,
        };
        Ok(horizon.min(first_waiting).saturating_sub(1))
    }

    /// A counter that changes whenever the set of stored vectors does, in the same
    /// transaction.
    pub async fn vectors_version(&self) -> Result<u64> {
        let client = self.connection().await?;
        let row = client
            .query_one("SELECT vectors_version FROM embedding_state", &[])
            .await?;
        unsigned(row.get(0))
    }

    /// Up to `limit` messages of every session in key order, after `after`: the pages a
    /// keyword index rebuild reads. One statement, so one snapshot; each session contributes
    /// at most `limit` rows, so a page reads little more than it returns.
    pub async fn all_messages(
        &self,
        after: Option<MessageKey>,
        limit: usize,
    ) -> Result<Vec<(MessageKey, Message)>> {
        let (sid, index) = cursor(after);
        let client = self.connection().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT s.sid, s.tenant, s.session_id, s.key_id, k.key, {MESSAGE_COLUMNS}
                     FROM sessions s
                     JOIN data_keys k ON k.tenant = s.tenant AND k.key_id = s.key_id
                     CROSS JOIN LATERAL (
                         SELECT * FROM messages
                         WHERE messages.tenant = s.tenant AND messages.session_id = s.session_id
                           AND messages.idx > CASE WHEN s.sid = $1::bigint THEN $2::bigint ELSE -1 END
                         ORDER BY messages.idx
                         LIMIT $3
                     ) m
                     WHERE s.sid >= $1::bigint
                     ORDER BY s.sid, m.idx
                     LIMIT $3"
                ),
                &[&sid, &index, &bound(limit)],
            )
            .await?;
        rows.iter()
            .map(|row| {
                let sid = unsigned(row.get("sid"))?;
                Ok((message_key(sid, unsigned(row.get("idx"))?)?, message(row)?))
            })
            .collect()
    }

    /// The messages behind `keys`, in the order given; `None` for one that does not exist
    /// (any more). One statement, so one snapshot.
    pub async fn messages_by_key(&self, keys: &[MessageKey]) -> Result<Vec<Option<Message>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let sids: Vec<i64> = keys
            .iter()
            .map(|key| i64::try_from(key.session()).unwrap_or(i64::MAX))
            .collect();
        let indices: Vec<i64> = keys
            .iter()
            .map(|key| i64::try_from(key.index()).unwrap_or(i64::MAX))
            .collect();
        let client = self.connection().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT w.n, s.tenant, s.session_id, s.key_id, k.key, {MESSAGE_COLUMNS}
                     FROM unnest($1::bigint[], $2::bigint[]) WITH ORDINALITY AS w(sid, idx, n)
                     JOIN sessions s ON s.sid = w.sid
                     JOIN data_keys k ON k.tenant = s.tenant AND k.key_id = s.key_id
                     JOIN messages m
                       ON m.tenant = s.tenant AND m.session_id = s.session_id AND m.idx = w.idx"
                ),
                &[&sids, &indices],
            )
            .await?;
        let mut found = vec![None; keys.len()];
        for row in &rows {
            let n = usize::try_from(row.get::<_, i64>("n") - 1).unwrap_or(usize::MAX);
            if let Some(slot) = found.get_mut(n) {
                *slot = Some(message(row)?);
            }
        }
        Ok(found)
    }

    /// Deletes every vector and the model, and queues every message of every session again
    /// (one entry per session, from index 0), in one transaction: `memlayer reindex`. Returns
    /// how many messages were queued (erased ones count, as in the redb store, which also
    /// queues by index range).
    pub async fn reset_embeddings(&self) -> Result<u64> {
        let mut client = self.connection().await?;
        let txn = client.transaction().await?;
        // Sessions, vectors, outbox rows, then the state row: the order every writer locks
        // them in (an erasure: the session, its messages, their vectors, its outbox rows).
        // The sessions queued are locked (as the outbox's foreign key would lock them), so a
        // deletion either waits for the reset or committed before and its session is skipped.
        let row = txn
            .query_one(
                "WITH live AS (
                     SELECT tenant, sid, message_count FROM sessions
                     WHERE message_count > 0
                     FOR KEY SHARE
                 ), queued AS (
                     INSERT INTO embedding_outbox (tenant, ord, sid, first_index, count)
                         SELECT tenant, row_number() OVER (ORDER BY sid) - 1, sid, 0,
                                message_count
                         FROM live
                         RETURNING ord, count
                 )
                 SELECT coalesce(sum(count), 0)::bigint AS messages,
                        coalesce(max(ord) + 1, 0) AS entries
                 FROM queued",
                &[],
            )
            .await?;
        txn.execute("DELETE FROM embedding_vectors", &[]).await?;
        // Every node following the outbox holds vectors of the old model: the entries go as
        // if pruned, so that each finds it missed them and rebuilds.
        let removed = txn
            .query_opt(
                "WITH gone AS (
                     DELETE FROM embedding_outbox WHERE xid <> pg_current_xact_id()
                     RETURNING xid, ord
                 )
                 SELECT xid::text::bigint AS xid, ord FROM gone
                 ORDER BY xid DESC, ord DESC LIMIT 1",
                &[],
            )
            .await?;
        let pruned_through = match removed {
            Some(row) => position(row.get("xid"), row.get("ord"))?,
            None => 0,
        };
        let entries: i64 = row.get("entries");
        if entries > 1 << ORD_BITS {
            return Err(StoreError::Conflict(format!(
                "{entries} sessions to queue again; a reset queues at most {} at once",
                1_u64 << ORD_BITS
            ))
            .into());
        }
        txn.execute("SELECT memlayer_bump_vectors_version()", &[])
            .await?;
        txn.execute(
            "UPDATE embedding_state
             SET model_name = NULL, model_sha256 = NULL, model_dimension = NULL,
                 pruned_through = greatest(pruned_through, $1)",
            &[&i64::try_from(pruned_through).unwrap_or(i64::MAX)],
        )
        .await?;
        txn.commit().await?;
        unsigned(row.get("messages"))
    }
}

/// The appends the outbox rows `entries` (`xid`, `ord`, `sid`, `first_index`, `count`) name,
/// in their order, with their messages read in `txn`: no session and no messages for a session
/// deleted since, no erased message.
async fn appends(
    txn: &tokio_postgres::Transaction<'_>,
    entries: &[Row],
) -> Result<Vec<PendingEmbedding>> {
    let mut pending = Vec::with_capacity(entries.len());
    if entries.is_empty() {
        return Ok(pending);
    }
    let mut sids = Vec::with_capacity(entries.len());
    let mut firsts = Vec::with_capacity(entries.len());
    let mut counts = Vec::with_capacity(entries.len());
    for entry in entries {
        sids.push(entry.get::<_, i64>("sid"));
        firsts.push(entry.get::<_, i64>("first_index"));
        counts.push(entry.get::<_, i64>("count"));
        pending.push(PendingEmbedding {
            seq: position(entry.get("xid"), entry.get("ord"))?,
            session: None,
            messages: Vec::new(),
        });
    }
    let rows = txn
        .query(
            &format!(
                "SELECT w.n, s.tenant, s.session_id, s.key_id, k.key, {MESSAGE_COLUMNS}
                 FROM unnest($1::bigint[], $2::bigint[], $3::bigint[])
                      WITH ORDINALITY AS w(sid, first_index, count, n)
                 JOIN sessions s ON s.sid = w.sid
                 JOIN data_keys k ON k.tenant = s.tenant AND k.key_id = s.key_id
                 LEFT JOIN messages m
                   ON m.tenant = s.tenant AND m.session_id = s.session_id
                  AND m.idx >= w.first_index AND m.idx < w.first_index + w.count
                 ORDER BY w.n, m.idx"
            ),
            &[&sids, &firsts, &counts],
        )
        .await?;
    for row in &rows {
        let n = usize::try_from(row.get::<_, i64>("n") - 1).unwrap_or(usize::MAX);
        let entry = pending.get_mut(n).ok_or_else(|| PostgresError::Corrupted {
            what: "embedding outbox",
            detail: format!("no entry {n}"),
        })?;
        let tenant: String = row.get("tenant");
        let session_id: String = row.get("session_id");
        let sid = unsigned(sids[n])?;
        if let Some(index) = row.get::<_, Option<i64>>("idx") {
            let key = key_from_row(row)?;
            let index = unsigned(index)?;
            let content = open_content(&key, &tenant, &session_id, index, row)?;
            let message = message_from_row(&key, &tenant, &session_id, row, content)?;
            entry.messages.push((message_key(sid, index)?, message));
        }
        entry
            .session
            .get_or_insert(SessionRef { tenant, session_id });
    }
    Ok(pending)
}

/// The stored vectors of the messages of `appends`, read in `txn`, opened.
async fn stored_vectors(
    txn: &tokio_postgres::Transaction<'_>,
    appends: &[PendingEmbedding],
) -> Result<Vec<(MessageKey, Vec<f32>)>> {
    let (sids, indices): (Vec<i64>, Vec<i64>) = appends
        .iter()
        .flat_map(|append| &append.messages)
        .map(|(key, _)| {
            (
                i64::try_from(key.session()).unwrap_or(i64::MAX),
                i64::try_from(key.index()).unwrap_or(i64::MAX),
            )
        })
        .unzip();
    if sids.is_empty() {
        return Ok(Vec::new());
    }
    let rows = txn
        .query(
            "SELECT v.sid, v.idx, v.components, s.tenant, s.session_id, s.key_id, k.key
             FROM unnest($1::bigint[], $2::bigint[]) AS w(sid, idx)
             JOIN embedding_vectors v ON v.sid = w.sid AND v.idx = w.idx
             JOIN sessions s ON s.tenant = v.tenant AND s.session_id = v.session_id
             JOIN data_keys k ON k.tenant = s.tenant AND k.key_id = s.key_id",
            &[&sids, &indices],
        )
        .await?;
    rows.iter().map(vector_from_row).collect()
}

/// The vector in `row` (`sid`, `idx`, `components`, `tenant`, `session_id` and the key),
/// opened.
fn vector_from_row(row: &Row) -> Result<(MessageKey, Vec<f32>)> {
    let sid = unsigned(row.get("sid"))?;
    let index = unsigned(row.get("idx"))?;
    let tenant: String = row.get("tenant");
    let session_id: String = row.get("session_id");
    let bytes = key_from_row(row)?.open(
        vector_place(&tenant, &session_id, index),
        row.get("components"),
    )?;
    Ok((message_key(sid, index)?, components_from_bytes(&bytes)?))
}

/// The position of the outbox row of transaction `xid` with ordinal `ord`.
fn position(xid: i64, ord: i64) -> Result<u64> {
    if !(0..MAX_XID).contains(&xid) || !(0..1 << ORD_BITS).contains(&ord) {
        return Err(PostgresError::Corrupted {
            what: "embedding outbox",
            detail: format!(
                "transaction {xid}, row {ord}: beyond the positions a u64 holds \
                 (transaction ids below 2^40, 2^24 rows a transaction)"
            ),
        });
    }
    Ok(((xid as u64) << ORD_BITS) | ord as u64)
}

/// What a removal entry of the outbox (`removal` set) tells a follower to drop.
fn removal(entry: &Row) -> Result<Removal> {
    let sid = || unsigned(entry.get::<_, Option<i64>>("sid").unwrap_or(-1));
    Ok(match entry.get::<_, &str>("removal") {
        "session" => Removal::Session(checked_sid(sid()?)?),
        "message" => Removal::Message(message_key(sid()?, unsigned(entry.get("first_index"))?)?),
        _ => Removal::Memory(MemoryChange {
            tenant: entry.get("tenant"),
            user_id: entry.get("user_id"),
            id: unsigned(entry.get("memory_id"))?,
            revision: entry
                .get::<_, Option<i64>>("revision")
                .map(unsigned)
                .transpose()?,
        }),
    })
}

/// The transaction id and ordinal of position `seq`; `None` for one no row can have.
pub(crate) fn place_of(seq: u64) -> Option<(i64, i64)> {
    let xid = i64::try_from(seq >> ORD_BITS).ok()?;
    let ord = i64::try_from(seq & ((1 << ORD_BITS) - 1)).ok()?;
    Some((xid, ord))
}

/// `sid`, refused if a [`MessageKey`] cannot hold it.
fn checked_sid(sid: u64) -> Result<u64> {
    if sid > MAX_SID {
        return Err(PostgresError::Corrupted {
            what: "session",
            detail: format!(
                "surrogate key {sid} beyond the {} a message key holds",
                MAX_SID + 1
            ),
        });
    }
    Ok(sid)
}

/// The key of message `index` of session `sid`, refused when it does not fit.
fn message_key(sid: u64, index: u64) -> Result<MessageKey> {
    let sid = checked_sid(sid)?;
    if index >= MAX_MESSAGES_PER_SESSION {
        return Err(PostgresError::Corrupted {
            what: "message",
            detail: format!("index {index} beyond the {MAX_MESSAGES_PER_SESSION} a key holds"),
        });
    }
    Ok(MessageKey::new(sid, index))
}

/// The message in `row` (`tenant`, `session_id`, the key and [`MESSAGE_COLUMNS`]), opened.
fn message(row: &Row) -> Result<Message> {
    let tenant: String = row.get("tenant");
    let session_id: String = row.get("session_id");
    let key = key_from_row(row)?;
    let index = unsigned(row.get("idx"))?;
    let content = open_content(&key, &tenant, &session_id, index, row)?;
    message_from_row(&key, &tenant, &session_id, row, content)
}

/// Where a message's vector is sealed.
fn vector_place<'a>(tenant: &'a str, session_id: &'a str, index: u64) -> Place<'a> {
    Place {
        tenant,
        session_id,
        index,
        field: Field::Vector,
    }
}

fn components_to_bytes(components: &[f32]) -> Vec<u8> {
    components.iter().flat_map(|c| c.to_le_bytes()).collect()
}

fn components_from_bytes(bytes: &[u8]) -> Result<Vec<f32>> {
    let chunks = bytes.chunks_exact(4);
    if !chunks.remainder().is_empty() {
        return Err(PostgresError::Corrupted {
            what: "sealed vector",
            detail: format!("{} bytes, not whole f32 components", bytes.len()),
        });
    }
    Ok(chunks
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// A page's start after `after` as (sid, index): before every key for `None`.
fn cursor(after: Option<MessageKey>) -> (i64, i64) {
    after.map_or((-1, -1), |key| {
        (
            i64::try_from(key.session()).unwrap_or(i64::MAX),
            i64::try_from(key.index()).unwrap_or(i64::MAX),
        )
    })
}

/// A page size as a LIMIT.
fn bound(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_order_as_transactions_then_rows_and_round_trip() {
        let a = position(5, (1 << ORD_BITS) - 1).unwrap();
        let b = position(6, 0).unwrap();
        assert!(a < b);
        assert_eq!(place_of(a), Some((5, (1 << ORD_BITS) - 1)));
        assert_eq!(place_of(b), Some((6, 0)));
        assert!(position(MAX_XID, 0).is_err());
        assert!(position(1, 1 << ORD_BITS).is_err());
        assert!(position(-1, 0).is_err());
    }

    #[test]
    fn session_keys_beyond_forty_bits_are_refused() {
        assert_eq!(MAX_SID, (1 << 40) - 1);
        assert!(message_key(MAX_SID, 0).is_ok());
        assert!(message_key(MAX_SID + 1, 0).is_err());
        assert!(message_key(1, MAX_MESSAGES_PER_SESSION).is_err());
    }

    #[test]
    fn components_round_trip() {
        let components = vec![0.5, -1.25, f32::MIN_POSITIVE];
        assert_eq!(
            components_from_bytes(&components_to_bytes(&components)).unwrap(),
            components
        );
        assert!(components_from_bytes(&[0; 5]).is_err());
    }
}
