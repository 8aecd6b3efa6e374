use crate::test_cluster;
use crate::{PostgresError, SCHEMA_VERSION};

/// The versions recorded in `schema_migrations`, in order.
async fn recorded(client: &tokio_postgres::Client) -> Vec<i64> {
    client
        .query(
            "SELECT version FROM schema_migrations ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// Every table, view and function of the public schema, to compare before and after.
async fn schema(client: &tokio_postgres::Client) -> Vec<String> {
    client
        .query(
            "SELECT 'relation ' || relname FROM pg_class
             WHERE relnamespace = 'public'::regnamespace
             UNION ALL
             SELECT 'function ' || proname FROM pg_proc
             WHERE pronamespace = 'public'::regnamespace
             ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[tokio::test]
async fn a_fresh_database_migrates_and_opening_again_changes_nothing() {
    let db = test_cluster::database().await.unwrap();
    let client = db.connect().await.unwrap();
    assert_eq!(schema(&client).await, Vec::<String>::new());

    db.store().await.unwrap();
    let all: Vec<i64> = (1..=SCHEMA_VERSION).collect();
    assert_eq!(recorded(&client).await, all);
    let migrated = schema(&client).await;
    for table in ["sessions", "messages", "idempotency", "data_keys", "feed"] {
        assert!(migrated.contains(&format!("relation {table}")), "{table}");
    }
    let partitions = migrated
        .iter()
        .filter(|name| name.starts_with("relation data_keys_") && !name.ends_with("_pkey"))
        .count();
    assert_eq!(partitions, 16);
    let applied_at: Vec<std::time::SystemTime> = client
        .query("SELECT applied_at FROM schema_migrations", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();

    db.store().await.unwrap();
    assert_eq!(recorded(&client).await, all, "nothing applied twice");
    assert_eq!(schema(&client).await, migrated);
    let again: Vec<std::time::SystemTime> = client
        .query("SELECT applied_at FROM schema_migrations", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(again, applied_at);
}

#[tokio::test]
async fn a_database_of_a_newer_memlayer_is_refused_and_left_unchanged() {
    let db = test_cluster::database().await.unwrap();
    db.store().await.unwrap();
    let client = db.connect().await.unwrap();
    let newer = SCHEMA_VERSION + 1;
    client
        .execute(
            "INSERT INTO schema_migrations (version) VALUES ($1)",
            &[&newer],
        )
        .await
        .unwrap();
    let before = (recorded(&client).await, schema(&client).await);

    let err = db.store().await.unwrap_err();
    assert!(
        matches!(err, PostgresError::NewerSchema { found, supported }
            if found == newer && supported == SCHEMA_VERSION),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains(&newer.to_string()) && message.contains(&SCHEMA_VERSION.to_string()),
        "{message}"
    );
    assert_eq!((recorded(&client).await, schema(&client).await), before);
}

#[tokio::test]
async fn a_newer_database_is_refused_before_anything_is_created() {
    // A database where only the version table exists, recording a future version: even the
    // migrations this build knows are not applied.
    let db = test_cluster::database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE schema_migrations (
                 version bigint PRIMARY KEY,
                 applied_at timestamptz NOT NULL DEFAULT now()
             );
             INSERT INTO schema_migrations (version) VALUES (1000);",
        )
        .await
        .unwrap();
    let before = schema(&client).await;
    let err = db.store().await.unwrap_err();
    assert!(
        matches!(err, PostgresError::NewerSchema { found: 1000, .. }),
        "{err:?}"
    );
    assert_eq!(schema(&client).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn opens_racing_on_a_fresh_database_all_succeed() {
    let db = test_cluster::database().await.unwrap();
    let opens: Vec<_> = (0..4)
        .map(|_| {
            let db = db.clone();
            tokio::spawn(async move { db.store().await.map(drop) })
        })
        .collect();
    for open in opens {
        open.await.unwrap().unwrap();
    }
    let client = db.connect().await.unwrap();
    assert_eq!(
        recorded(&client).await,
        (1..=SCHEMA_VERSION).collect::<Vec<_>>()
    );
}
