//! The database stopped under a running server, as a power cut stops it: requests meanwhile
//! fail with `503 storage_unavailable`, nothing acknowledged is lost, the server takes
//! requests again by itself once the database is back, and an erasure the stop interrupted
//! finishes on its own, soon. These tests start a PostgreSQL cluster of their own, which they
//! may stop without disturbing the tests sharing the suite's.

use std::time::{Duration, Instant};

use memlayer_postgres::test_cluster::{TestCluster, TestDatabase};
use memlayer_tests::{TestServer, assert_error, json, on_postgres};

/// A runtime for the test's own connections to the database.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Waits (a minute at most) until a session of `database` waits on a lock.
fn until_one_waits_on_a_lock(runtime: &tokio::runtime::Runtime, database: &TestDatabase) {
    let watcher = runtime.block_on(database.connect()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let waiting: i64 = runtime
            .block_on(watcher.query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            ))
            .unwrap()
            .get(0);
        if waiting > 0 {
            return;
        }
        assert!(Instant::now() < deadline, "the erasure never waited");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn an_erasure_a_database_stop_interrupted_finishes_by_itself_once_it_is_back() {
    if on_postgres() {
        // The test makes its cluster whatever the backend; the PostgreSQL pass would only
        // repeat it.
        return;
    }
    let cluster = TestCluster::start().expect("a cluster of the test's own");
    let runtime = runtime();
    let database = runtime.block_on(cluster.database()).unwrap();
    let server = TestServer::on_database(database.clone());
    let said = json!({ "role": "user", "content": "erase me", "user_id": "u", "agent_id": "a" });
    for session in ["kept", "erased"] {
        let (status, body) = server.post(&format!("/v1/sessions/{session}/messages"), &said);
        assert_eq!(status, 201, "{body}");
    }

    // The erasure is recorded, then waits for the session's row, which a transaction of
    // the test holds, while the database stops.
    let holder = runtime.block_on(database.connect()).unwrap();
    runtime
        .block_on(
            holder.batch_execute(
                "BEGIN; SELECT 1 FROM sessions WHERE session_id = 'erased' FOR UPDATE",
            ),
        )
        .unwrap();
    let interrupted = std::thread::scope(|scope| {
        let deletion = scope.spawn(|| server.delete("/v1/sessions/erased"));
        until_one_waits_on_a_lock(&runtime, &database);
        cluster.crash().unwrap();
        deletion.join().unwrap()
    });
    assert_eq!(interrupted.0, 503, "{}", interrupted.1);
    assert_eq!(interrupted.1["error"]["code"], "storage_unavailable");
    let erasure = interrupted.1["error"]["erasure_id"]
        .as_u64()
        .unwrap_or_else(|| panic!("the erasure was recorded: {}", interrupted.1));
    let (status, body) = server.post("/v1/sessions/kept/messages", &said);
    assert_error(&(status, body), 503, "storage_unavailable");

    cluster.restart().unwrap();
    // Long before the maintenance pass every 15 minutes.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, receipt) = server.get(&format!("/v1/admin/erasures/{erasure}"));
        if status == 200 {
            assert_eq!(receipt["counts"]["sessions"], 1, "{receipt}");
            break;
        }
        assert_eq!(status, 202, "{receipt}");
        assert!(
            Instant::now() < deadline,
            "the erasure is still pending 30 s after the database came back"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(server.get("/v1/sessions/erased").0, 404);
    let (status, body) = server.post("/v1/sessions/kept/messages", &said);
    assert_eq!(status, 201, "the server takes writes again: {body}");
    let (status, kept) = server.get("/v1/sessions/kept/messages");
    assert_eq!(status, 200);
    assert_eq!(kept["messages"].as_array().unwrap().len(), 2, "{kept}");
}
