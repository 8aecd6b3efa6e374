//! The change feed: every append's (tenant, session, first index, count), for the derived
//! data (indexes, embeddings) to follow.
//!
//! A sequence number cannot order the feed for a reader: sequence values are taken when a
//! transaction inserts, not when it commits, so a reader that saw row 11 may later find row 10
//! commit, behind a cursor already past it. Each row instead carries its transaction's id
//! (`pg_current_xact_id()`), and a read delivers only rows of transactions older than its
//! snapshot's `xmin`: every transaction with an id below `xmin` has ended, so the set of
//! committed rows below it is final and no row can appear there later.
//!
//! The guarantee: a reader that follows the cursors it is given receives every committed
//! change exactly once, and never one of a transaction that rolled back. Changes come in
//! transaction id order (the order transactions first wrote, not the order they committed),
//! so across sessions the order is not commit order, and even within a session an append with
//! a lower index can come after one with a higher index; consumers order by index themselves.
//! A change is delivered once every transaction that started writing before it has ended: a
//! long-running transaction anywhere in the cluster (transaction ids are cluster-wide) delays
//! the feed until it ends.

use tokio_postgres::IsolationLevel;

use crate::{PgStore, PostgresError, Result};

/// Where a reader stands in the feed. Start with [`FeedCursor::start`]; after each read, go on
/// from [`FeedPage::cursor`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FeedCursor {
    /// Every row of a transaction below this id has been delivered.
    horizon: i64,
    /// Within the transactions at or above `horizon`, the last row delivered, in the order
    /// rows are read; `None` when none was.
    after: Option<FeedPosition>,
}

/// A row's place in the reading order: transaction id, then the row's key.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FeedPosition {
    xid: i64,
    tenant: String,
    session_id: String,
    first_index: i64,
}

impl FeedCursor {
    /// The beginning of the feed.
    pub fn start() -> Self {
        Self::default()
    }
}

/// One append, as the feed records it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Change {
    /// The tenant.
    pub tenant: String,
    /// The session appended to.
    pub session_id: String,
    /// The first appended index.
    pub first_index: u64,
    /// How many messages were appended.
    pub count: u64,
}

/// What a read of the feed found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedPage {
    /// The changes, in delivery order.
    pub changes: Vec<Change>,
    /// Where the next read goes on.
    pub cursor: FeedCursor,
}

impl PgStore {
    /// Up to `limit` changes after `cursor` whose transactions are known to have ended (see
    /// the module documentation), and the cursor to read on from. Fewer than `limit` changes
    /// mean the reader caught up with every transaction that has ended.
    pub async fn feed_since(&self, cursor: &FeedCursor, limit: usize) -> Result<FeedPage> {
        if limit == 0 {
            return Ok(FeedPage {
                changes: Vec::new(),
                cursor: cursor.clone(),
            });
        }
        let mut client = self.connection().await?;
        // One snapshot for both statements: the horizon and the rows below it.
        let txn = client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        let horizon: i64 = txn
            .query_one(
                "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint",
                &[],
            )
            .await?
            .get(0);
        let after = cursor.after.as_ref();
        let rows = txn
            .query(
                "SELECT xid::text::bigint AS xid, tenant, session_id, first_index, count
                 FROM feed
                 WHERE xid >= $1::bigint::text::xid8 AND xid < $2::bigint::text::xid8
                   AND ($3::bigint IS NULL
                        OR (xid, tenant, session_id, first_index)
                           > ($3::bigint::text::xid8, $4::text, $5::text, $6::bigint))
                 ORDER BY xid, tenant, session_id, first_index
                 LIMIT $7",
                &[
                    &cursor.horizon,
                    &horizon,
                    &after.map(|a| a.xid),
                    &after.map(|a| a.tenant.as_str()),
                    &after.map(|a| a.session_id.as_str()),
                    &after.map(|a| a.first_index),
                    &i64::try_from(limit).unwrap_or(i64::MAX),
                ],
            )
            .await?;
        txn.commit().await?;
        let mut changes = Vec::with_capacity(rows.len());
        for row in &rows {
            changes.push(Change {
                tenant: row.get("tenant"),
                session_id: row.get("session_id"),
                first_index: unsigned(row.get("first_index"))?,
                count: unsigned(row.get("count"))?,
            });
        }
        let next = if rows.len() < limit {
            // Everything below the horizon was read: the next read starts there.
            FeedCursor {
                horizon: horizon.max(cursor.horizon),
                after: None,
            }
        } else {
            let last = rows.last().expect("a full page of at least one row");
            FeedCursor {
                horizon: cursor.horizon,
                after: Some(FeedPosition {
                    xid: last.get("xid"),
                    tenant: last.get("tenant"),
                    session_id: last.get("session_id"),
                    first_index: last.get("first_index"),
                }),
            }
        };
        Ok(FeedPage {
            changes,
            cursor: next,
        })
    }
}

fn unsigned(value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|_| PostgresError::Corrupted {
        what: "feed row",
        detail: format!("negative index or count {value}"),
    })
}
