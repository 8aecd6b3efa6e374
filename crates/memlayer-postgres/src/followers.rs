//! The registry of nodes following the shared embedding outbox (src/embeddings.rs, "Several
//! nodes"; migration 9), so that an erasure's receipt is issued only once every live node
//! applied it.
//!
//! Every node records, as its indexes follow the outbox, the position it applied everything
//! up to, and when it did so by the database's clock ([`PgStore::follower_seen`]): that is its
//! heartbeat, so a node that stops following (it died, froze, or lost the database) stops
//! being live after the lapse its callers agree on. An erasing node waits until no other live
//! node is behind the erasure's removal entries ([`PgStore::followers_behind`]); a node that
//! learns its own record had lapsed knows receipts were issued without it, and catches up
//! before it reports ready. Records of nodes gone for a week are deleted with the outbox's
//! pruning.

use std::time::Duration;

use memlayer_store::{FollowerRecord, validate_id};

use crate::{PgStore, Result};

/// How long a node's record stays after its last heartbeat: a node gone that long (replaced,
/// its data directory deleted) is not coming back under its name.
const FORGOTTEN_AFTER: Duration = Duration::from_secs(7 * 24 * 60 * 60);

impl PgStore {
    /// Records that node `node` applied every outbox entry up to `followed`, now; answers
    /// whether its previous record (if any) was older than `lapse`, so that erasures may have
    /// been finished without waiting for it, and how many nodes are live (seen within
    /// `lapse`, this one included).
    pub async fn follower_seen(
        &self,
        node: &str,
        followed: u64,
        lapse: Duration,
    ) -> Result<FollowerRecord> {
        validate_id("node_id", node)?;
        let client = self.connection().await?;
        // The CTE reads the row as it was before the upsert in the same statement.
        let row = client
            .query_one(
                "WITH previous AS (SELECT seen_at FROM followers WHERE node_id = $1),
                 seen AS (
                     INSERT INTO followers (node_id, followed, seen_at)
                     VALUES ($1, $2, clock_timestamp())
                     ON CONFLICT (node_id)
                     DO UPDATE SET followed = excluded.followed, seen_at = excluded.seen_at
                 )
                 SELECT coalesce((SELECT seen_at < clock_timestamp()
                                         - $3::bigint * interval '1 millisecond'
                                  FROM previous), false) AS lapsed,
                        -- The statement's snapshot predates the upsert: this node counts
                        -- once whether or not its old record is live.
                        1 + (SELECT count(*) FROM followers
                             WHERE node_id <> $1
                               AND seen_at >= clock_timestamp()
                                             - $3::bigint * interval '1 millisecond') AS live",
                &[&node, &position(followed), &millis(lapse)],
            )
            .await?;
        Ok(FollowerRecord {
            lapsed: row.get("lapsed"),
            live_nodes: u64::try_from(row.get::<_, i64>("live")).unwrap_or(1),
        })
    }

    /// How many nodes other than `except` are live (seen within `lapse`) and have not applied
    /// every entry up to `position`.
    pub async fn followers_behind(
        &self,
        position: u64,
        lapse: Duration,
        except: &str,
    ) -> Result<u64> {
        let client = self.connection().await?;
        let row = client
            .query_one(
                "SELECT count(*) AS behind FROM followers
                 WHERE node_id <> $3 AND followed < $1
                   AND seen_at >= clock_timestamp() - $2::bigint * interval '1 millisecond'",
                &[&self::position(position), &millis(lapse), &except],
            )
            .await?;
        Ok(u64::try_from(row.get::<_, i64>("behind")).unwrap_or(0))
    }

    /// Deletes the records of nodes not seen for [`FORGOTTEN_AFTER`].
    pub(crate) async fn forget_gone_followers(&self) -> Result<()> {
        let client = self.connection().await?;
        client
            .execute(
                "DELETE FROM followers
                 WHERE seen_at < clock_timestamp() - $1::bigint * interval '1 millisecond'",
                &[&millis(FORGOTTEN_AFTER)],
            )
            .await?;
        Ok(())
    }
}

/// A position as the `bigint` column holds it. Positions need transaction ids below 2^39 to
/// fit (half a trillion transactions); beyond, they compare as equal at the top.
fn position(position: u64) -> i64 {
    i64::try_from(position).unwrap_or(i64::MAX)
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
