//! Erasure: deleting a session destroys its data key (crypto-shredding, see `seal`), and
//! [`PgStore::reclaim_destroyed_keys`] then removes the destroyed keys' bytes from every file
//! of the cluster.
//!
//! Deleting rows is not enough for the promise that nothing erased can be recovered from file
//! bytes: PostgreSQL only marks a deleted tuple dead, and its bytes stay in the table's file,
//! in the WAL records that inserted it and in full-page images of its page (`full_page_writes`
//! stays on: torn pages would otherwise corrupt the database after a crash). So an erasure
//! deletes the key's row and records the partition that held it in `destroyed_keys`, in the
//! transaction that deletes the session; a reclaim, later and for many erasures at once:
//!
//! 1. checks the server keeps no copy the reclaim cannot reach ([`ServerSettings::check`]):
//!    `wal_recycle = off` (a removed WAL segment is otherwise renamed for reuse, its bytes
//!    intact), `wal_keep_size = 0`, `archive_mode = off`, no replication slot, no connected
//!    standby or base backup, on PostgreSQL 15 `vacuum_defer_cleanup_age = 0`, and no logging
//!    of statement parameters (`log_parameter_max_length = 0` if statements are logged,
//!    `log_parameter_max_length_on_error = 0`), as keys are parameters;
//! 2. waits (briefly) until no transaction that could still see a destroyed key runs (the
//!    rewrite keeps a tuple some snapshot can see), and checks it may rewrite each partition
//!    (a `VACUUM` of a table the role does not own only warns);
//! 3. `VACUUM FULL`s each partition that held a destroyed key: the live rows are copied to a
//!    new file, and at commit the old file is truncated to zero length (it is unlinked after
//!    the next checkpoint; `mdunlinkfork` in PostgreSQL's md.c);
//! 4. `pg_switch_wal()` ends the WAL segment holding every record written so far, then a
//!    `CHECKPOINT` puts the redo point in the next segment, and removes (with `wal_recycle =
//!    off`: unlinks) every segment before it;
//! 5. checks `pg_wal` holds no segment up to the switched one any more (a second switch and
//!    checkpoint first if one does), and only then forgets the work and answers.
//!
//! The partition's name and the erasing transaction's id stay in `destroyed_keys` until then:
//! neither is secret, and a crash between an erasure and its reclaim must not lose the work.

use std::time::{Duration, Instant};

use memlayer_store::{Access, SessionDeleted, StoreError};
use tokio_postgres::error::SqlState;

use crate::episodes::DELETE_USER_EPISODES;
use crate::seal::DataKey;
use crate::session_memory::DROP_SESSION_MEMORIES;
use crate::sessions::unsigned;
use crate::{PgStore, PostgresError, Result};

/// The receipt of [`PgStore::reclaim_destroyed_keys`]: the bytes of these destroyed keys are
/// in no file of the cluster any more.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reclaimed {
    /// How many destroyed keys this reclaim made unrecoverable.
    pub keys: u64,
    /// The `data_keys` partitions it rewrote.
    pub partitions: Vec<String>,
}

/// A server setting, or state, the promise depends on, as [`PostgresError::ErasureUnsafe`]
/// names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    /// `wal_recycle`.
    pub wal_recycle: String,
    /// `wal_keep_size`, as `SHOW` answers it.
    pub wal_keep_size: String,
    /// `archive_mode`.
    pub archive_mode: String,
    /// `vacuum_defer_cleanup_age`; `None` on servers without it (PostgreSQL 16 and later).
    pub vacuum_defer_cleanup_age: Option<String>,
    /// Rows of `pg_replication_slots`.
    pub replication_slots: i64,
    /// Rows of `pg_stat_replication`: standbys and base backups streaming from the server.
    pub wal_senders: i64,
    /// `log_statement`.
    pub log_statement: String,
    /// `log_min_duration_statement`.
    pub log_min_duration_statement: String,
    /// `log_min_duration_sample`.
    pub log_min_duration_sample: String,
    /// `log_parameter_max_length`.
    pub log_parameter_max_length: String,
    /// `log_parameter_max_length_on_error`.
    pub log_parameter_max_length_on_error: String,
}

impl ServerSettings {
    /// Refuses when the server keeps copies of WAL or data that a reclaim cannot remove.
    pub fn check(&self) -> Result<()> {
        let refuse = |setting: &'static str, found: &str, required: &'static str| {
            Err(PostgresError::ErasureUnsafe {
                setting,
                found: found.to_owned(),
                required,
            })
        };
        if self.wal_recycle != "off" {
            return refuse("wal_recycle", &self.wal_recycle, "off");
        }
        if self.wal_keep_size != "0" && self.wal_keep_size != "0MB" {
            return refuse("wal_keep_size", &self.wal_keep_size, "0");
        }
        if self.archive_mode != "off" {
            return refuse("archive_mode", &self.archive_mode, "off");
        }
        if let Some(age) = self
            .vacuum_defer_cleanup_age
            .as_deref()
            .filter(|a| *a != "0")
        {
            return refuse("vacuum_defer_cleanup_age", age, "0");
        }
        if self.replication_slots != 0 {
            let found = self.replication_slots.to_string();
            return refuse("pg_replication_slots", &found, "no replication slot");
        }
        if self.wal_senders != 0 {
            let found = self.wal_senders.to_string();
            return refuse("pg_stat_replication", &found, "no standby or base backup");
        }
        // A logged statement's parameters (keys are parameters) land in the server's log
        // files, which no reclaim can rewrite.
        let statements_logged = matches!(self.log_statement.as_str(), "mod" | "all")
            || self.log_min_duration_statement != "-1"
            || self.log_min_duration_sample != "-1";
        if statements_logged && self.log_parameter_max_length != "0" {
            return refuse(
                "log_parameter_max_length",
                &self.log_parameter_max_length,
                "0 while statements are logged",
            );
        }
        if self.log_parameter_max_length_on_error != "0" {
            return refuse(
                "log_parameter_max_length_on_error",
                &self.log_parameter_max_length_on_error,
                "0",
            );
        }
        Ok(())
    }
}

/// Whether `name` is one of the partitions migration 1 created: it is put into a `VACUUM`
/// statement, which takes no parameters.
fn is_key_partition(name: &str) -> bool {
    name.strip_prefix("data_keys_")
        .is_some_and(|n| n.len() == 2 && n.bytes().all(|b| b.is_ascii_digit()))
}

impl PgStore {
    /// Deletes a session with its messages, runs, summary, idempotency records, feed rows
    /// and vectors, the episodes drawn from it and the session memories it was merged into,
    /// and destroys their data keys, in one transaction. With a user-scoped `access` another
    /// user's session is not found, as in the redb store.
    ///
    /// The feed rows go too: a reader must not be sent to a session that is gone, and removing
    /// rows changes nothing for other sessions' rows (cursors compare positions, not rows).
    ///
    /// The keys' bytes remain in the cluster's files until [`Self::reclaim_destroyed_keys`].
    pub async fn delete_session(
        &self,
        access: &Access,
        session_id: &str,
    ) -> Result<SessionDeleted> {
        access.check_session(session_id)?;
        let tenant = access.tenant();
        let mut client = self.connection().await?;
        let txn = client.transaction().await?;
        // First, so that the session's row lock keeps appends out until the commit; the
        // statements after it then see every message an append committed before. Messages,
        // vectors, runs, the summary and idempotency records go by ON DELETE CASCADE; a
        // trigger drops the appends still waiting to be embedded and records the removal
        // for the other nodes' indexes (migrations/0008_shared_feed.sql).
        // The count reads the statement's snapshot, from before the cascade: the messages
        // the session still held.
        let Some(row) = txn
            .query_opt(
                "WITH gone AS (
                     DELETE FROM sessions
                     WHERE tenant = $1 AND session_id = $2 AND ($3::text IS NULL OR user_id = $3)
                     RETURNING sid, user_id, key_id
                 )
                 SELECT sid, user_id, key_id,
                        (SELECT count(*) FROM messages
                         WHERE tenant = $1 AND session_id = $2) AS messages
                 FROM gone",
                &[&tenant, &session_id, &access.user()],
            )
            .await?
        else {
            return Err(StoreError::session_not_found(session_id).into());
        };
        let user_id: String = row.get("user_id");
        destroy_keys(&txn, tenant, &[row.get("key_id")]).await?;
        txn.execute(
            "DELETE FROM feed WHERE tenant = $1 AND session_id = $2",
            &[&tenant, &session_id],
        )
        .await?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
            [&tenant, &user_id, &Some(session_id)];
        let episodes = delete_sealed_rows_in(&txn, tenant, DELETE_USER_EPISODES, &params).await?;
        let session_memories =
            delete_sealed_rows_in(&txn, tenant, DROP_SESSION_MEMORIES, &params).await?;
        txn.commit().await?;
        // After the commit: a failed deletion keeps the key, and the entry is only a guess.
        self.known.forget(tenant, session_id);
        Ok(SessionDeleted {
            sid: unsigned(row.get("sid"))?,
            messages: unsigned(row.get("messages"))?,
            episodes,
            session_memories,
        })
    }

    /// Makes the keys destroyed so far (by every node of this database) unrecoverable from
    /// the cluster's files, as the module documentation describes, and answers how many.
    /// Refuses with [`PostgresError::ErasureUnsafe`] on a server that keeps copies it cannot
    /// remove, [`PostgresError::ErasureBlocked`] while an older transaction still runs after
    /// five seconds, [`PostgresError::KeysInUse`] while transactions hold a partition as
    /// long, and [`PostgresError::ErasureNotPermitted`] without the privileges; the work
    /// stays recorded for the next call. Only an `Ok` is a receipt.
    ///
    /// The role needs: ownership of the `data_keys` partitions (the role that migrated owns
    /// them), `pg_checkpoint` (PostgreSQL 15; superuser before), `EXECUTE` on
    /// `pg_switch_wal()` and `pg_monitor` (for `pg_ls_waldir()`). It rewrites partitions under
    /// an exclusive lock (appends creating sessions there wait) and forces two WAL switches
    /// and checkpoints at most: run it in batches, not after every erasure.
    pub async fn reclaim_destroyed_keys(&self) -> Result<Reclaimed> {
        let client = self.connection().await?;
        server_settings(&client).await?.check()?;
        let work = client
            .query(
                "SELECT id, partition, xid::text::bigint AS xid FROM destroyed_keys ORDER BY id",
                &[],
            )
            .await?;
        if work.is_empty() {
            return Ok(Reclaimed::default());
        }
        let ids: Vec<i64> = work.iter().map(|row| row.get("id")).collect();
        let newest: i64 = work
            .iter()
            .map(|row| row.get("xid"))
            .max()
            .unwrap_or_default();
        let mut partitions: Vec<String> = work.iter().map(|row| row.get("partition")).collect();
        partitions.sort();
        partitions.dedup();
        if let Some(name) = partitions.iter().find(|name| !is_key_partition(name)) {
            return Err(PostgresError::Corrupted {
                what: "destroyed key record",
                detail: format!("{name:?} is not a partition of data_keys"),
            });
        }

        wait_for_older_transactions(&client, newest).await?;
        let not_permitted: Vec<String> = client
            .query(
                // Who VACUUM lets rewrite a table: its owner's members, the database's
                // owner's, superusers (`vacuum_is_permitted_for_relation`).
                "SELECT relname::text FROM pg_class
                 WHERE oid = ANY($1::text[]::regclass[])
                   AND NOT pg_has_role(relowner, 'USAGE')
                   AND NOT pg_has_role(
                       (SELECT datdba FROM pg_database WHERE datname = current_database()),
                       'USAGE')",
                &[&partitions],
            )
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        if let Some(partition) = not_permitted.into_iter().next() {
            return Err(PostgresError::ErasureNotPermitted { partition });
        }

        for partition in &partitions {
            rewrite(&client, partition).await?;
        }
        retire_wal(&client).await?;
        client
            .execute("DELETE FROM destroyed_keys WHERE id = ANY($1)", &[&ids])
            .await?;
        Ok(Reclaimed {
            keys: ids.len() as u64,
            partitions,
        })
    }
}

/// How long a reclaim waits for transactions older than the newest erasure to end, and then
/// for each partition's lock, before it refuses. Every database's transactions count, so a
/// long writing one elsewhere on the cluster holds erasures back too; the erasure
/// coordinator tries three times before it leaves the job pending.
const GIVE_WAY_AFTER: Duration = Duration::from_secs(5);

/// Waits until no transaction runs that could still see a key destroyed by transaction
/// `newest` (an `xid8`), or refuses after [`GIVE_WAY_AFTER`]: `VACUUM FULL` copies a
/// dead tuple that some snapshot may still see into the new file.
///
/// Its horizon (`ComputeXidHorizons` in procarray.c) is the oldest snapshot (`xmin`) of this
/// database's backends, and of those of no database (walsenders), including the vacuuming
/// backend's own, whose snapshot starts below the id of every transaction running anywhere
/// in the cluster: so the ids of every database's transactions count too. A transaction
/// starting after this check can neither see the erasures, which committed before, nor hold
/// an id below theirs. `age` compares transaction ids across wraparound.
async fn wait_for_older_transactions(client: &tokio_postgres::Client, newest: i64) -> Result<()> {
    let started = Instant::now();
    loop {
        // Which backends, for the refusal: their process ids, databases, states and how long
        // their transactions ran, never their statements (another application's may hold
        // personal data). Prepared transactions have no backend.
        let blocking = client
            .query(
                &format!(
                    "SELECT {BACKEND} FROM (
                         SELECT pid, datname, state, backend_type, xact_start, backend_xmin AS x
                         FROM pg_stat_activity
                         WHERE pid <> pg_backend_pid() AND backend_xmin IS NOT NULL
                           AND (datname IS NULL OR datname = current_database())
                         UNION ALL
                         SELECT pid, datname, state, backend_type, xact_start, backend_xid
                         FROM pg_stat_activity
                         WHERE pid <> pg_backend_pid() AND backend_xid IS NOT NULL
                         UNION ALL
                         SELECT NULL, NULL, NULL, NULL, NULL, transaction FROM pg_prepared_xacts
                     ) running
                     WHERE age(running.x) >= age(xid($1::bigint::text::xid8))"
                ),
                &[&newest],
            )
            .await?;
        if blocking.is_empty() {
            return Ok(());
        }
        if started.elapsed() >= GIVE_WAY_AFTER {
            return Err(PostgresError::ErasureBlocked {
                transactions: blocking.len(),
                blockers: described(&blocking),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How a refusal describes a backend of `pg_stat_activity` (columns `pid`, `datname`,
/// `state`, `backend_type`, `xact_start`; a row of nulls is a prepared transaction): its
/// process id, database, state and how long its transaction ran, never its statement
/// (another application's may hold personal data).
const BACKEND: &str = "coalesce('backend ' || pid || ' in ' || coalesce(datname::text, 'no database')
                               || ' (' || coalesce(state, backend_type) || ', for '
                               || round(extract(epoch FROM clock_timestamp() - xact_start)::numeric, 1)
                               || ' s)',
                               'a prepared transaction')";

/// The distinct descriptions ([`BACKEND`]) in the first column of `rows`, for a refusal.
fn described(rows: &[tokio_postgres::Row]) -> String {
    let mut backends: Vec<String> = rows.iter().map(|row| row.get(0)).collect();
    backends.sort();
    backends.dedup();
    backends.join(", ")
}

/// How long one try of a rewrite waits for its partition's lock. `VACUUM FULL` needs the
/// partition alone (`ACCESS EXCLUSIVE`), and while it waits for a transaction holding it,
/// every later statement on the partition (an append creating a session, a read of a
/// session's key) queues behind it: those writing hold transaction ids meanwhile, which
/// hold back every other reclaim on the cluster. So a try gives way after this.
const LOCK_TRY: Duration = Duration::from_millis(200);

/// Rewrites `partition` (`VACUUM FULL`), trying for its lock [`LOCK_TRY`] at a time, and
/// refuses with [`PostgresError::KeysInUse`] when transactions held it for
/// [`GIVE_WAY_AFTER`]: the work stays recorded for the next reclaim.
async fn rewrite(client: &tokio_postgres::Client, partition: &str) -> Result<()> {
    let started = Instant::now();
    client
        .batch_execute(&format!("SET lock_timeout = {}", LOCK_TRY.as_millis()))
        .await?;
    let rewritten = loop {
        match client
            .batch_execute(&format!("VACUUM (FULL) {partition}"))
            .await
        {
            Err(err) if err.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                if started.elapsed() >= GIVE_WAY_AFTER {
                    break Err(match lock_holders(client, partition).await {
                        Ok(holders) => PostgresError::KeysInUse {
                            partition: partition.to_owned(),
                            holders,
                        },
                        Err(err) => err,
                    });
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            done => break done.map_err(PostgresError::from),
        }
    };
    // The connection goes back to the pool.
    client.batch_execute("RESET lock_timeout").await?;
    rewritten
}

/// The backends ([`BACKEND`]) whose transactions hold a lock on `partition`.
async fn lock_holders(client: &tokio_postgres::Client, partition: &str) -> Result<String> {
    let rows = client
        .query(
            &format!(
                "SELECT {BACKEND} FROM pg_stat_activity
                 WHERE pid IN (SELECT pid FROM pg_locks
                               WHERE granted AND relation = $1::text::regclass)
                   AND pid <> pg_backend_pid()"
            ),
            &[&partition],
        )
        .await?;
    Ok(described(&rows))
}

/// The settings and state [`ServerSettings::check`] judges, as the server reports them now.
async fn server_settings(client: &tokio_postgres::Client) -> Result<ServerSettings> {
    let row = client
        .query_one(
            "SELECT current_setting('wal_recycle') AS wal_recycle,
                    current_setting('wal_keep_size') AS wal_keep_size,
                    current_setting('archive_mode') AS archive_mode,
                    current_setting('vacuum_defer_cleanup_age', true) AS defer,
                    (SELECT count(*) FROM pg_replication_slots) AS slots,
                    (SELECT count(*) FROM pg_stat_replication) AS senders,
                    current_setting('log_statement') AS log_statement,
                    current_setting('log_min_duration_statement') AS log_min_duration_statement,
                    current_setting('log_min_duration_sample') AS log_min_duration_sample,
                    current_setting('log_parameter_max_length') AS log_parameter_max_length,
                    current_setting('log_parameter_max_length_on_error') AS on_error",
            &[],
        )
        .await?;
    Ok(ServerSettings {
        wal_recycle: row.get("wal_recycle"),
        wal_keep_size: row.get("wal_keep_size"),
        archive_mode: row.get("archive_mode"),
        vacuum_defer_cleanup_age: row.get("defer"),
        replication_slots: row.get("slots"),
        wal_senders: row.get("senders"),
        log_statement: row.get("log_statement"),
        log_min_duration_statement: row.get("log_min_duration_statement"),
        log_min_duration_sample: row.get("log_min_duration_sample"),
        log_parameter_max_length: row.get("log_parameter_max_length"),
        log_parameter_max_length_on_error: row.get("on_error"),
    })
}

/// Removes every WAL segment written so far from `pg_wal`: ends the current segment, then
/// checkpoints, which removes the segments before the new redo point's. Checks they are gone,
/// since the receipt depends on it; a second round, which should never be needed, is tried
/// before refusing.
async fn retire_wal(client: &tokio_postgres::Client) -> Result<()> {
    let mut left = 0;
    for _ in 0..2 {
        let last: String = client
            .query_one("SELECT pg_walfile_name(pg_switch_wal())", &[])
            .await?
            .get(0);
        client.batch_execute("CHECKPOINT").await?;
        // Segment names are 24 hex digits (timeline, log, segment), in write order on one
        // timeline; `.history` and `.partial` files are not segments.
        left = client
            .query_one(
                "SELECT count(*) FROM pg_ls_waldir()
                 WHERE name ~ '^[0-9A-F]{24}$' AND name <= $1",
                &[&last],
            )
            .await?
            .get(0);
        if left == 0 {
            return Ok(());
        }
    }
    Err(PostgresError::WalRetained { segments: left })
}

impl PgStore {
    /// [`delete_sealed_rows_in`] in a transaction of its own.
    pub(crate) async fn delete_sealed_rows(
        &self,
        tenant: &str,
        delete: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64> {
        let mut client = self.connection().await?;
        let txn = client.transaction().await?;
        let deleted = delete_sealed_rows_in(&txn, tenant, delete, params).await?;
        txn.commit().await?;
        Ok(deleted)
    }
}

/// Runs `delete`, a `DELETE … RETURNING key_id` of rows of `tenant` each sealed under a key
/// of its own, and destroys those keys, in `txn`; returns how many rows.
pub(crate) async fn delete_sealed_rows_in(
    txn: &tokio_postgres::Transaction<'_>,
    tenant: &str,
    delete: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<u64> {
    let keys: Vec<uuid::Uuid> = txn
        .query(delete, params)
        .await?
        .iter()
        .map(|row| row.get("key_id"))
        .collect();
    destroy_keys(txn, tenant, &keys).await?;
    Ok(keys.len() as u64)
}

/// A new data key of `tenant`, stored by `txn`.
pub(crate) async fn new_key(
    txn: &tokio_postgres::Transaction<'_>,
    tenant: &str,
) -> Result<DataKey> {
    let key = DataKey::generate()?;
    txn.execute(
        "INSERT INTO data_keys (tenant, key_id, key) VALUES ($1, $2, $3)",
        &[&tenant, &key.id, &key.bytes()],
    )
    .await?;
    Ok(key)
}

/// Destroys data keys of `tenant` in `txn`, recording their partitions for
/// [`PgStore::reclaim_destroyed_keys`], which then removes them from every file: how every
/// erasure destroys what it erases.
pub(crate) async fn destroy_keys(
    txn: &tokio_postgres::Transaction<'_>,
    tenant: &str,
    key_ids: &[uuid::Uuid],
) -> Result<()> {
    if key_ids.is_empty() {
        return Ok(());
    }
    txn.execute(
        "WITH destroyed AS (
             DELETE FROM data_keys WHERE tenant = $1 AND key_id = ANY($2)
             RETURNING tableoid::regclass::text AS partition
         )
         INSERT INTO destroyed_keys (partition) SELECT partition FROM destroyed",
        &[&tenant, &key_ids],
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn safe() -> ServerSettings {
        ServerSettings {
            wal_recycle: "off".into(),
            wal_keep_size: "0".into(),
            archive_mode: "off".into(),
            vacuum_defer_cleanup_age: Some("0".into()),
            replication_slots: 0,
            wal_senders: 0,
            log_statement: "ddl".into(),
            log_min_duration_statement: "-1".into(),
            log_min_duration_sample: "-1".into(),
            log_parameter_max_length: "-1".into(),
            log_parameter_max_length_on_error: "0".into(),
        }
    }

    #[test]
    fn each_setting_that_keeps_copies_is_refused_by_name() {
        safe().check().unwrap();
        ServerSettings {
            vacuum_defer_cleanup_age: None,
            wal_keep_size: "0MB".into(),
            // Statements are logged, their parameters not.
            log_statement: "all".into(),
            log_parameter_max_length: "0".into(),
            ..safe()
        }
        .check()
        .unwrap();
        let unsafe_ones = [
            (
                "wal_recycle",
                ServerSettings {
                    wal_recycle: "on".into(),
                    ..safe()
                },
            ),
            (
                "wal_keep_size",
                ServerSettings {
                    wal_keep_size: "64MB".into(),
                    ..safe()
                },
            ),
            (
                "archive_mode",
                ServerSettings {
                    archive_mode: "on".into(),
                    ..safe()
                },
            ),
            (
                "vacuum_defer_cleanup_age",
                ServerSettings {
                    vacuum_defer_cleanup_age: Some("5".into()),
                    ..safe()
                },
            ),
            (
                "pg_replication_slots",
                ServerSettings {
                    replication_slots: 1,
                    ..safe()
                },
            ),
            (
                "pg_stat_replication",
                ServerSettings {
                    wal_senders: 1,
                    ..safe()
                },
            ),
            (
                "log_parameter_max_length",
                ServerSettings {
                    log_statement: "mod".into(),
                    ..safe()
                },
            ),
            (
                "log_parameter_max_length",
                ServerSettings {
                    log_min_duration_statement: "0".into(),
                    ..safe()
                },
            ),
            (
                "log_parameter_max_length",
                ServerSettings {
                    log_min_duration_sample: "100ms".into(),
                    ..safe()
                },
            ),
            (
                "log_parameter_max_length_on_error",
                ServerSettings {
                    log_parameter_max_length_on_error: "-1".into(),
                    ..safe()
                },
            ),
        ];
        for (name, settings) in unsafe_ones {
            match settings.check() {
                Err(PostgresError::ErasureUnsafe { setting, .. }) => assert_eq!(setting, name),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn only_the_migrated_partitions_are_vacuumed() {
        assert!(is_key_partition("data_keys_00"));
        assert!(is_key_partition("data_keys_15"));
        for name in [
            "data_keys",
            "data_keys_1",
            "data_keys_001",
            "data_keys_0x",
            "x; DROP",
        ] {
            assert!(!is_key_partition(name), "{name}");
        }
    }
}
