//! Tests against a real PostgreSQL (`crate::test_cluster`): each test has a database of its
//! own, on a throwaway cluster or on `MEMLAYER_TEST_DATABASE_URL`.

mod feed;
mod migrations;
mod sealing;
mod sessions;

use memlayer_store::{Append, NewMessage, NewSession, Role};

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
