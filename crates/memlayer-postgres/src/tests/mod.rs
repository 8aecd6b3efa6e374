//! Tests against a real PostgreSQL (`crate::test_cluster`): each test has a database of its
//! own, on a throwaway cluster or on `MEMLAYER_TEST_DATABASE_URL`.

mod erasure;
mod feed;
mod files;
mod migrations;
mod sealing;
mod sessions;

use memlayer_store::{Append, NewMessage, NewSession, Role, StoreError};

use crate::PostgresError;

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
