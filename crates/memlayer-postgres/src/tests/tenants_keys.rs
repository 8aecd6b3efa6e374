//! Tenants and keys beyond the conformance cases: several nodes on one database, what reaches
//! the cluster's files, and the statement every request runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use memlayer_store::{BOOTSTRAP_TENANT, Bootstrap, KeyRejection, KeyRole, NewKey, Timestamp};

use super::files::{data_directory, found_in_files};
use super::until_one_waits_on_a_lock;
use crate::keys::AUTHENTICATE;
use crate::test_cluster;

fn service(tenant: &str) -> NewKey {
    NewKey {
        tenant: tenant.into(),
        role: KeyRole::Service,
        user_id: None,
        name: Some("backend".into()),
        expires_at: None,
    }
}

/// Waits (a minute at most) until `count` sessions of `watcher`'s database wait on a lock.
async fn until_waiting_on_a_lock(watcher: &tokio_postgres::Client, count: i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let waiting: i64 = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if waiting == count {
            return;
        }
        assert!(Instant::now() < deadline, "{count} never waited");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Two nodes start at once on an empty database: both bootstrap while neither has committed,
/// and exactly one generates a key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_starting_at_once_generate_one_bootstrap_key() {
    for _ in 0..3 {
        let db = test_cluster::database().await.unwrap();
        let (a, b) = (
            Arc::new(db.store().await.unwrap()),
            Arc::new(db.store().await.unwrap()),
        );
        // Hold both back before either reads the keys, then let them go together.
        let mut holder = db.connect().await.unwrap();
        let watcher = db.connect().await.unwrap();
        let held = holder.transaction().await.unwrap();
        held.batch_execute("LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE")
            .await
            .unwrap();
        let first = tokio::spawn({
            let a = a.clone();
            async move { a.bootstrap_keys(None).await }
        });
        let second = tokio::spawn({
            let b = b.clone();
            async move { b.bootstrap_keys(None).await }
        });
        until_waiting_on_a_lock(&watcher, 2).await;
        held.commit().await.unwrap();
        let outcomes = [
            first.await.unwrap().unwrap(),
            second.await.unwrap().unwrap(),
        ];
        let generated: Vec<_> = outcomes
            .iter()
            .filter_map(|outcome| match outcome {
                Bootstrap::Generated(issued) => Some(issued.clone()),
                Bootstrap::Existing => None,
                other => panic!("nothing configured, yet {other:?}"),
            })
            .collect();
        assert_eq!(generated.len(), 1, "{outcomes:?}");
        let keys = a.list_keys(Some(BOOTSTRAP_TENANT)).await.unwrap();
        assert_eq!(keys, [generated[0].key.clone()]);
        assert!(
            b.authenticate_key(&generated[0].secret, Timestamp::now())
                .await
                .unwrap()
                .is_ok()
        );
    }
}

/// A key revoked through one node is refused by another at its next request: nothing is
/// cached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_holds_on_every_node_at_the_next_request() {
    let db = test_cluster::database().await.unwrap();
    let (a, b) = (db.store().await.unwrap(), db.store().await.unwrap());
    let issued = a.create_key(service("t")).await.unwrap();
    let now = Timestamp::now();
    assert_eq!(
        b.authenticate_key(&issued.secret, now).await.unwrap(),
        Ok(issued.key.clone())
    );
    a.revoke_key(Some("t"), &issued.key.prefix)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        b.authenticate_key(&issued.secret, now).await.unwrap(),
        Err(KeyRejection::Revoked)
    );
}

/// Authenticating is one statement on the unique index of prefixes, whatever the table's size
/// (sequential scans are disabled so that the plan shows the index the planner can use).
#[tokio::test]
async fn authentication_is_one_lookup_in_the_prefix_index() {
    let db = test_cluster::database().await.unwrap();
    let _store = db.store().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("SET enable_seqscan = off")
        .await
        .unwrap();
    let candidates = vec!["0123456789abcdef", "config"];
    let plan: Vec<String> = client
        .query(&format!("EXPLAIN {AUTHENTICATE}"), &[&candidates])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let plan = plan.join("\n");
    assert!(plan.contains("api_keys_by_prefix"), "{plan}");
    assert!(!plan.contains("Seq Scan"), "{plan}");
}

/// A settings document is in no file of the cluster, nor is any key; the control, stored as
/// plain text, is found by the same scan.
#[tokio::test]
async fn settings_and_keys_reach_no_file_of_the_cluster() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    let canary = |what: &str| format!("{what}-canary-{}", uuid::Uuid::new_v4().simple());
    let (tenant_wide, agent, control) = (canary("tenant"), canary("agent"), canary("control"));
    let document = |text: &str| {
        serde_json::json!({ "prompt": text })
            .as_object()
            .cloned()
            .unwrap()
    };
    store
        .put_settings("t", None, Some(document(&tenant_wide)))
        .await
        .unwrap();
    store
        .put_settings("t", Some("bot"), Some(document(&agent)))
        .await
        .unwrap();
    assert_eq!(
        store.settings("t", Some("bot")).await.unwrap(),
        Some(document(&agent))
    );
    let issued = store.create_key(service("t")).await.unwrap();
    let configured = format!("{}-configured", uuid::Uuid::new_v4().simple());
    store.bootstrap_keys(Some(&configured)).await.unwrap();

    let client = db.connect().await.unwrap();
    client
        .execute("CREATE TABLE scratch (text text)", &[])
        .await
        .unwrap();
    client
        .execute("INSERT INTO scratch VALUES ($1)", &[&control])
        .await
        .unwrap();
    let data_directory = data_directory(&client).await;
    let secret = issued.secret.rsplit('_').next().unwrap().to_owned();
    let hidden = [&tenant_wide, &agent, &issued.secret, &secret, &configured];
    let needles: Vec<&[u8]> = hidden
        .iter()
        .chain([&&control])
        .map(|text| text.as_bytes())
        .collect();
    let mut expected = vec![false; hidden.len()];
    expected.push(true);
    assert_eq!(
        found_in_files(&data_directory, &needles),
        expected,
        "{hidden:?} and the control found in {}",
        data_directory.display()
    );
}

/// Two first documents of one tenant at once: the one that loses the race for the tenant's
/// key waits for the winner's, and seals under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_first_documents_at_once_share_one_key() {
    let db = test_cluster::database().await.unwrap();
    let store = Arc::new(db.store().await.unwrap());
    let mut holder = db.connect().await.unwrap();
    let watcher = db.connect().await.unwrap();
    // Another node's first document, not yet committed, created the tenant's key.
    let held = holder.transaction().await.unwrap();
    let key_id = uuid::Uuid::new_v4();
    held.execute(
        "INSERT INTO tenant_keys (tenant, key_id) VALUES ('t', $1)",
        &[&key_id],
    )
    .await
    .unwrap();
    held.execute(
        "INSERT INTO data_keys (tenant, key_id, key) VALUES ('t', $1, $2)",
        &[&key_id, &[7u8; 32].as_slice()],
    )
    .await
    .unwrap();
    let document = serde_json::json!({"recall_k": 2})
        .as_object()
        .cloned()
        .unwrap();
    let put = tokio::spawn({
        let (store, document) = (store.clone(), document.clone());
        async move { store.put_settings("t", Some("bot"), Some(document)).await }
    });
    until_one_waits_on_a_lock(&watcher, "the second first document").await;
    held.commit().await.unwrap();
    put.await.unwrap().unwrap();
    assert_eq!(
        store.settings("t", Some("bot")).await.unwrap(),
        Some(document)
    );
    let sealed_under: uuid::Uuid = watcher
        .query_one(
            "SELECT key_id FROM settings WHERE tenant = 't' AND scope = 'a/bot'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(sealed_under, key_id);
    let keys: i64 = watcher
        .query_one("SELECT count(*) FROM data_keys WHERE tenant = 't'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(keys, 1);
}

/// A damaged digest is a corrupted key, and the error names neither the presented key nor
/// what is stored.
#[tokio::test]
async fn errors_show_no_key_material() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    let issued = store.create_key(service("t")).await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .execute(
            "UPDATE api_keys SET digest = substring(digest FROM 1 FOR 31) WHERE prefix = $1",
            &[&issued.key.prefix],
        )
        .await
        .unwrap();
    let err = store
        .authenticate_key(&issued.secret, Timestamp::now())
        .await
        .unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(shown.contains("corrupted"), "{shown}");
    let secret = issued.secret.rsplit('_').next().unwrap();
    assert!(!shown.contains(secret), "{shown}");
}
