//! The embedding feed: appends wait until their vectors are stored, whole and in order; the
//! indexes' look-ups by surrogate key. The feed is the whole store's, not a tenant's, so
//! each case needs a store of its own (the macro opens one per case).

use super::{conflict, invalid_input, refusal, tenant};
use crate::backend::{FeedBackend, SessionBackend};
use crate::model::{
    Access, Append, EmbeddingModel, MessageKey, NewMessage, NewSession, PendingEmbedding, Role,
};

/// One `#[tokio::test]` per feed case, each on a store of its own that `$open` evaluates to
/// (behind anything that derefs to a backend of sessions and of the feed).
#[macro_export]
macro_rules! feed_conformance {
    ($open:expr) => {
        $crate::feed_conformance!(@cases $open;
            appends_wait_whole_and_in_order,
            stored_vectors_leave_the_feed,
            messages_and_sessions_by_key,
            reset_queues_every_message_again
        );
    };
    (@cases $open:expr; $($case:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let subject = $open;
                $crate::conformance::feed::$case(&*subject).await;
            }
        )*
    };
}

fn model(sha256: &str) -> EmbeddingModel {
    EmbeddingModel {
        name: "test-model".into(),
        sha256: sha256.into(),
        dimension: 3,
    }
}

/// Creates session `id` of user "ada" holding `texts`, alternating user and assistant.
async fn conversation<B>(backend: &B, access: &Access, id: &str, texts: &[&str])
where
    B: SessionBackend + ?Sized,
{
    let messages = texts
        .iter()
        .enumerate()
        .map(|(n, text)| {
            let role = if n % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            };
            NewMessage::new(role, *text, 2)
        })
        .collect();
    let create = NewSession {
        user_id: "ada".into(),
        agent_id: "agent".into(),
        ..NewSession::default()
    };
    backend
        .append(
            access,
            id,
            Append {
                messages,
                create: Some(create),
                idempotency_key: None,
            },
        )
        .await
        .unwrap();
}

/// Stores a vector by model `sha256` for every message waiting, and ends their entries.
pub(super) async fn embed_everything<B: FeedBackend + ?Sized>(backend: &B, sha256: &str) {
    let pending = backend.pending_embeddings(1_000).await.unwrap();
    embed(backend, sha256, &pending).await;
}

/// Stores a vector by model `sha256` for every message of `pending`, and ends their entries.
async fn embed<B: FeedBackend + ?Sized>(backend: &B, sha256: &str, pending: &[PendingEmbedding]) {
    let done = pending.iter().map(|entry| entry.seq).collect();
    let vectors = pending
        .iter()
        .flat_map(|entry| &entry.messages)
        .map(|(key, _)| (*key, vec![0.0, 0.0, 1.0]))
        .collect();
    backend
        .store_embeddings(model(sha256), done, vectors)
        .await
        .unwrap();
}

async fn sid<B: FeedBackend + ?Sized>(backend: &B, access: &Access, id: &str) -> u64 {
    backend.session_key(access, id).await.unwrap().unwrap()
}

/// Each append waits as one entry, oldest first, with its session and its messages' keys;
/// a batch holds whole entries.
pub async fn appends_wait_whole_and_in_order<B>(backend: &B)
where
    B: SessionBackend + FeedBackend + ?Sized,
{
    let tenant = tenant();
    let ada = Access::one_user(&tenant, "ada");
    assert_eq!(backend.pending_embedding_count().await.unwrap(), 0);
    assert!(backend.pending_embeddings(10).await.unwrap().is_empty());
    let before = backend.outbox_head().await.unwrap();

    conversation(backend, &ada, "s1", &["one", "two"]).await;
    conversation(backend, &ada, "s2", &["three"]).await;
    assert!(backend.outbox_head().await.unwrap() > before);
    assert_eq!(backend.pending_embedding_count().await.unwrap(), 2);

    let (s1, s2) = (
        sid(backend, &ada, "s1").await,
        sid(backend, &ada, "s2").await,
    );
    assert_ne!(s1, s2);
    // A batch of one message still takes the first entry whole.
    let first = backend.pending_embeddings(1).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].messages.len(), 2);
    // A store several processes write answers an entry once while it is claimed (a store
    // with one writer, again until it is stored).
    let mut pending = first.clone();
    for entry in backend.pending_embeddings(100).await.unwrap() {
        if entry.seq != first[0].seq {
            pending.push(entry);
        }
    }
    let seen: Vec<_> = pending
        .iter()
        .map(|entry| {
            let at = entry.session.as_ref().unwrap();
            assert_eq!(at.tenant, tenant);
            let messages: Vec<_> = entry
                .messages
                .iter()
                .map(|(key, message)| (*key, message.content.as_str()))
                .collect();
            (at.session_id.as_str(), messages)
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                "s1",
                vec![
                    (MessageKey::new(s1, 0), "one"),
                    (MessageKey::new(s1, 1), "two")
                ]
            ),
            ("s2", vec![(MessageKey::new(s2, 0), "three")]),
        ]
    );
    assert!(pending[0].seq < pending[1].seq);
}

/// Stored vectors are read back in key order and their entries leave the feed; the set's
/// version moves; a vector of the wrong size or of another model is refused.
pub async fn stored_vectors_leave_the_feed<B>(backend: &B)
where
    B: SessionBackend + FeedBackend + ?Sized,
{
    let tenant = tenant();
    let ada = Access::one_user(&tenant, "ada");
    conversation(backend, &ada, "s1", &["one", "two"]).await;
    conversation(backend, &ada, "s2", &["three"]).await;
    assert_eq!(backend.vector_model().await.unwrap(), None);
    let version = backend.vectors_version().await.unwrap();

    let pending = backend.pending_embeddings(1).await.unwrap();
    let first = &pending[0];
    let vectors: Vec<_> = first
        .messages
        .iter()
        .enumerate()
        .map(|(n, (key, _))| (*key, vec![n as f32, 1.0, 0.0]))
        .collect();
    backend
        .store_embeddings(model("aa"), vec![first.seq], vectors.clone())
        .await
        .unwrap();
    assert_eq!(backend.pending_embedding_count().await.unwrap(), 1);
    let left = backend.pending_embeddings(100).await.unwrap();
    assert_eq!(left.len(), 1);
    assert!(left[0].seq > first.seq);
    assert_eq!(backend.vector_model().await.unwrap(), Some(model("aa")));
    assert_ne!(backend.vectors_version().await.unwrap(), version);

    let stored = backend.vectors(None, 10).await.unwrap();
    let read: Vec<_> = stored
        .iter()
        .map(|v| (v.key, v.components.clone()))
        .collect();
    assert_eq!(read, vectors);
    assert_eq!(
        (stored[0].role, stored[1].role),
        (Role::User, Role::Assistant)
    );
    let after_first = backend.vectors(Some(stored[0].key), 10).await.unwrap();
    assert_eq!(after_first, stored[1..]);
    assert_eq!(backend.vectors(None, 1).await.unwrap(), stored[..1]);

    let (key, _) = &left[0].messages[0];
    assert_eq!(
        refusal(
            backend
                .store_embeddings(model("aa"), vec![left[0].seq], vec![(*key, vec![1.0])])
                .await
        ),
        invalid_input()
    );
    assert_eq!(
        refusal(
            backend
                .store_embeddings(
                    model("bb"),
                    vec![left[0].seq],
                    vec![(*key, vec![1.0, 0.0, 0.0])]
                )
                .await
        ),
        conflict()
    );
    assert_eq!(backend.pending_embedding_count().await.unwrap(), 1);
}

/// Messages and sessions are found by key; gone or never-existing ones are told apart from
/// present ones.
pub async fn messages_and_sessions_by_key<B>(backend: &B)
where
    B: SessionBackend + FeedBackend + ?Sized,
{
    let tenant = tenant();
    let ada = Access::one_user(&tenant, "ada");
    conversation(backend, &ada, "s1", &["one", "two"]).await;
    conversation(backend, &ada, "s2", &["three"]).await;
    let (s1, s2) = (
        sid(backend, &ada, "s1").await,
        sid(backend, &ada, "s2").await,
    );

    let all = backend.all_messages(None, 10).await.unwrap();
    let mut expected = vec![
        (MessageKey::new(s1, 0), "one"),
        (MessageKey::new(s1, 1), "two"),
        (MessageKey::new(s2, 0), "three"),
    ];
    expected.sort();
    assert_eq!(
        all.iter()
            .map(|(key, m)| (*key, m.content.as_str()))
            .collect::<Vec<_>>(),
        expected
    );
    let rest = backend.all_messages(Some(all[0].0), 10).await.unwrap();
    assert_eq!(rest, all[1..]);

    let found = backend
        .messages_by_key(&[
            MessageKey::new(s1, 1),
            MessageKey::new(s1, 99),
            MessageKey::new(s2, 0),
        ])
        .await
        .unwrap();
    let contents: Vec<_> = found
        .iter()
        .map(|m| m.as_ref().map(|m| m.content.as_str()))
        .collect();
    assert_eq!(contents, [Some("two"), None, Some("three")]);

    let (at, session) = backend.session_by_key(s2).await.unwrap().unwrap();
    assert_eq!(
        (at.tenant.as_str(), at.session_id.as_str()),
        (tenant.as_str(), "s2")
    );
    assert_eq!((session.id.as_str(), session.message_count), ("s2", 1));
    assert_eq!(
        backend.session_ref(s1).await.unwrap().unwrap().session_id,
        "s1"
    );
    let never = s1.max(s2) + 1_000;
    assert_eq!(backend.session_ref(never).await.unwrap(), None);
    assert!(backend.session_by_key(never).await.unwrap().is_none());
    let deleted = backend
        .deleted_sessions(&[s1, s2, never].into_iter().collect())
        .await
        .unwrap();
    assert_eq!(deleted.into_iter().collect::<Vec<_>>(), [never]);

    // Another user's session has no key for this access.
    let bob = Access::one_user(&tenant, "bob");
    assert_eq!(backend.session_key(&bob, "s1").await.unwrap(), None);
}

/// A reset drops every vector and queues every message again.
pub async fn reset_queues_every_message_again<B>(backend: &B)
where
    B: SessionBackend + FeedBackend + ?Sized,
{
    let tenant = tenant();
    let ada = Access::one_user(&tenant, "ada");
    conversation(backend, &ada, "s1", &["one", "two"]).await;
    conversation(backend, &ada, "s2", &["three"]).await;
    embed_everything(backend, "aa").await;
    assert_eq!(backend.pending_embedding_count().await.unwrap(), 0);
    assert_eq!(backend.vectors(None, 10).await.unwrap().len(), 3);

    assert_eq!(backend.reset_embeddings().await.unwrap(), 3);
    assert!(backend.vectors(None, 10).await.unwrap().is_empty());
    let queued = backend.pending_embeddings(100).await.unwrap();
    assert_eq!(
        queued
            .iter()
            .map(|entry| entry.messages.len())
            .sum::<usize>(),
        3
    );
    // Another model may store vectors now.
    embed(backend, "bb", &queued).await;
    assert_eq!(backend.vector_model().await.unwrap(), Some(model("bb")));
}
