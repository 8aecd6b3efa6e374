//! Schema migrations, applied when a store opens.
//!
//! Every migration is a SQL file under `migrations/`, embedded at build time and applied in
//! version order. One transaction applies them all while it holds a transaction-scoped
//! advisory lock, so nodes starting at once against one database take turns: the first
//! migrates, the others then find nothing left to do. Each applied version is recorded in
//! `schema_migrations` in that same transaction, so a failed migration leaves no trace.

use tokio_postgres::Client;

use crate::{PostgresError, Result};

/// The migrations, in order: version, name, SQL.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "schema", include_str!("../migrations/0001_schema.sql")),
    (2, "erasure", include_str!("../migrations/0002_erasure.sql")),
    (
        3,
        "tenants_keys",
        include_str!("../migrations/0003_tenants_keys.sql"),
    ),
    (
        4,
        "memories",
        include_str!("../migrations/0004_memories.sql"),
    ),
    (5, "feed", include_str!("../migrations/0005_feed.sql")),
    (
        6,
        "erasure_jobs",
        include_str!("../migrations/0006_erasure_jobs.sql"),
    ),
    (
        7,
        "job_leases",
        include_str!("../migrations/0007_job_leases.sql"),
    ),
    (
        8,
        "shared_feed",
        include_str!("../migrations/0008_shared_feed.sql"),
    ),
    (
        9,
        "followers",
        include_str!("../migrations/0009_followers.sql"),
    ),
    (
        10,
        "followed_memories",
        include_str!("../migrations/0010_followed_memories.sql"),
    ),
    (
        11,
        "claimed_by",
        include_str!("../migrations/0011_claimed_by.sql"),
    ),
];

/// The newest schema version this build knows.
pub const SCHEMA_VERSION: i64 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// The advisory lock migrations hold: "memlayer" in ASCII, a key no other program is likely to
/// take.
const MIGRATION_LOCK: i64 = 0x6d65_6d6c_6179_6572;

/// Brings the database's schema up to [`SCHEMA_VERSION`]; does nothing when it is there.
/// Refuses, changing nothing, a database a newer memlayer migrated.
pub(crate) async fn migrate(client: &mut Client) -> Result<()> {
    let txn = client.transaction().await?;
    txn.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    txn.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version bigint PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await?;
    let current: i64 = txn
        .query_one(
            "SELECT coalesce(max(version), 0) FROM schema_migrations",
            &[],
        )
        .await?
        .get(0);
    if current > SCHEMA_VERSION {
        // Dropping the transaction rolls it back: not even the table above is kept.
        return Err(PostgresError::NewerSchema {
            found: current,
            supported: SCHEMA_VERSION,
        });
    }
    for &(version, _name, sql) in MIGRATIONS.iter().filter(|(v, _, _)| *v > current) {
        txn.batch_execute(sql).await?;
        txn.execute(
            "INSERT INTO schema_migrations (version) VALUES ($1)",
            &[&version],
        )
        .await?;
    }
    txn.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_ascend_from_one_without_gaps_and_match_file_names() {
        for (position, (version, name, _)) in MIGRATIONS.iter().enumerate() {
            assert_eq!(*version, position as i64 + 1, "{name}");
        }
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        let expected: Vec<String> = MIGRATIONS
            .iter()
            .map(|(version, name, _)| format!("{version:04}_{name}.sql"))
            .collect();
        assert_eq!(files, expected, "every file is embedded, in order");
    }
}
