//! Tests against a real PostgreSQL (`crate::test_cluster`): each test has a database of its
//! own, on a throwaway cluster or on `MEMLAYER_TEST_DATABASE_URL`.

mod conformance;
mod conformance_feed;
mod conformance_memories;
mod conformance_tenants;
mod embeddings;
mod erasure;
mod feed;
mod files;
mod followers;
mod idle;
mod jobs;
mod listing;
mod memories;
mod migrations;
mod rekey;
mod runs;
mod sealing;
mod search;
mod sessions;
mod snapshot;
mod summaries;
mod tenants_keys;

use memlayer_store::{Append, NewMessage, NewSession, Role, StoreError};

use crate::{PgStore, PostgresError, test_cluster};

/// Waits (a minute at most) until one session of `watcher`'s database waits on a lock: the
/// statement a test holds back has reached the lock that holds it. `what` names it.
async fn until_one_waits_on_a_lock(watcher: &tokio_postgres::Client, what: &str) {
    until_waiting_on_locks(watcher, 1, what).await;
}

/// Waits (a minute at most) until `sessions` sessions of `watcher`'s database wait on locks.
async fn until_waiting_on_locks(watcher: &tokio_postgres::Client, sessions: i64, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
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
        if waiting == sessions {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{what} never waited");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// A store on a database of its own.
async fn fresh_store() -> PgStore {
    test_cluster::database()
        .await
        .expect("a test database")
        .store()
        .await
        .expect("the store opens")
}

/// The owner the tests' sessions mostly have.
fn owner(user: &str) -> NewSession {
    NewSession {
        user_id: user.into(),
        agent_id: "agent".into(),
        ..NewSession::default()
    }
}

/// An append of one user message saying `text`.
fn say(text: &str) -> Append {
    Append {
        messages: vec![NewMessage::new(Role::User, text, 1)],
        create: None,
        idempotency_key: None,
    }
}

/// An append of one user message saying `text` that creates the session for `user`.
fn creating(text: &str, user: &str) -> Append {
    Append {
        create: Some(owner(user)),
        ..say(text)
    }
}

/// The store error behind `result`'s error, which must be a caller mistake.
fn store_error<T: std::fmt::Debug>(result: Result<T, PostgresError>) -> StoreError {
    match result {
        Err(PostgresError::Store(err)) => err,
        other => panic!("expected a store error, got {other:?}"),
    }
}
