//! The eraser: an erased message or a deleted session leaves nothing readable behind through
//! any read of the other concerns, and jobs end with exactly one receipt. The job journal is
//! the whole store's, so each case needs a store of its own (the macro opens one per case).
//! Memories and episodes erased through citations are checked with the memories' cases.

use serde_json::json;

use super::feed::embed_everything;
use super::{not_found, refusal, tenant};
use crate::StoreError;
use crate::backend::{EraserBackend, FeedBackend, SessionBackend};
use crate::model::{
    Access, Append, MessageKey, Metadata, NewMessage, NewRun, NewSession, Role, RunStatus,
    Timestamp,
};

/// One `#[tokio::test]` per eraser case. `$subject` is bound to what `$open` evaluates to
/// (behind anything that derefs to a backend of sessions and of the feed); `$eraser` is then
/// evaluated to the backend's eraser.
#[macro_export]
macro_rules! eraser_conformance {
    ($subject:ident = $open:expr, $eraser:expr) => {
        $crate::eraser_conformance!(@cases $subject = $open, $eraser;
            erasing_a_message_reaches_everything_made_from_it,
            deleting_a_session_removes_everything_it_owns,
            sessions_by_user_and_by_inactivity,
            jobs_end_with_one_receipt
        );
    };
    (@cases $subject:ident = $open:expr, $eraser:expr; $($case:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let $subject = $open;
                let eraser = $eraser;
                $crate::conformance::erasure::$case(&*$subject, &eraser).await;
            }
        )*
    };
}

fn owner(user: &str) -> NewSession {
    NewSession {
        user_id: user.into(),
        agent_id: "agent".into(),
        ..NewSession::default()
    }
}

/// Session `id` of "ada" holding `texts`, the first appended under idempotency key "k", every
/// message embedded, a run that quotes the conversation, and a summary of all but the last
/// message. Returns the session's surrogate key.
async fn full_session<B>(backend: &B, access: &Access, id: &str, texts: &[&str]) -> u64
where
    B: SessionBackend + FeedBackend + ?Sized,
{
    let (first, rest) = texts.split_first().unwrap();
    backend
        .append(
            access,
            id,
            Append {
                messages: vec![NewMessage::new(Role::User, *first, 2)],
                create: Some(owner("ada")),
                idempotency_key: Some("k".into()),
            },
        )
        .await
        .unwrap();
    backend
        .append(
            access,
            id,
            Append {
                messages: rest
                    .iter()
                    .map(|text| NewMessage::new(Role::Assistant, *text, 2))
                    .collect(),
                create: None,
                idempotency_key: None,
            },
        )
        .await
        .unwrap();
    embed_everything(backend, "aa").await;
    let run = NewRun {
        run_id: None,
        status: RunStatus::Completed,
        content: Some(format!("answered after {first}")),
        tool_calls: vec![json!({"quote": first})],
        error: None,
        metadata: Metadata::new(),
    };
    backend.record_run(access, id, run).await.unwrap();
    let version = backend
        .snapshot(access, id)
        .await
        .unwrap()
        .unwrap()
        .version();
    let last = texts.len() as u64 - 1;
    backend
        .save_summary(access, id, version, format!("about {first}"), 0, last - 1)
        .await
        .unwrap();
    backend.session_key(access, id).await.unwrap().unwrap()
}

/// Erasing a message takes it, its vector, the summary covering it, its runs' text and the
/// idempotency digest that could confirm it; the other messages keep their indices, and
/// what was read before the erasure cannot be saved after it.
pub async fn erasing_a_message_reaches_everything_made_from_it<B, E>(backend: &B, eraser: &E)
where
    B: SessionBackend + FeedBackend + ?Sized,
    E: EraserBackend + ?Sized,
{
    let tenant = tenant();
    let ada = Access::one_user(&tenant, "ada");
    let sid = full_session(backend, &ada, "s", &["canary secret", "two", "three"]).await;
    let before = backend
        .snapshot(&ada, "s")
        .await
        .unwrap()
        .unwrap()
        .version();

    let bob = Access::one_user(&tenant, "bob");
    assert_eq!(
        refusal(eraser.erase_message(&bob, "s", 0).await),
        not_found()
    );
    let erased = eraser.erase_message(&ada, "s", 0).await.unwrap();
    assert_eq!(erased.sid, sid);
    assert!(erased.message && erased.vector && erased.summary);
    assert_eq!(erased.runs_redacted, 1);

    let left: Vec<_> = backend
        .messages(&ada, "s", 0, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.index)
        .collect();
    assert_eq!(left, [1, 2]);
    assert_eq!(
        backend
            .messages_by_key(&[MessageKey::new(sid, 0)])
            .await
            .unwrap(),
        [None]
    );
    let vectors = backend.vectors(None, 10).await.unwrap();
    assert_eq!(
        vectors.iter().map(|v| v.key.index()).collect::<Vec<_>>(),
        [1, 2]
    );
    assert!(
        backend
            .search_messages(&ada, "s", "canary", 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(backend.summary(&ada, "s").await.unwrap(), None);
    let runs = backend.runs(&ada, "s", 0, 10).await.unwrap();
    assert!(runs[0].redacted);
    assert_eq!(runs[0].content, None);
    assert!(runs[0].tool_calls.is_empty());

    // Derived data read before the erasure is refused.
    let changed = std::mem::discriminant(&StoreError::SessionChanged {
        session_id: String::new(),
    });
    assert_eq!(
        refusal(
            backend
                .save_summary(&ada, "s", before, "stale".into(), 1, 1)
                .await
        ),
        changed
    );
    // A replay of the erased append's key cannot confirm a guess of its text: any body is
    // answered with the first result.
    let guess = Append {
        messages: vec![NewMessage::new(Role::User, "a wrong guess", 2)],
        create: None,
        idempotency_key: Some("k".into()),
    };
    let replayed = backend.append(&ada, "s", guess).await.unwrap();
    assert!(replayed.replayed);
    assert_eq!((replayed.first_index, replayed.count), (0, 1));

    // Idempotent.
    let again = eraser.erase_message(&ada, "s", 0).await.unwrap();
    assert!(!again.message && !again.vector && !again.summary);
    eraser.compact().await.unwrap();
}

/// Deleting a session takes its messages, vectors, pending embeddings, runs and summary; its
/// id can be used again, by a session with a new surrogate key.
pub async fn deleting_a_session_removes_everything_it_owns<B, E>(backend: &B, eraser: &E)
where
    B: SessionBackend + FeedBackend + ?Sized,
    E: EraserBackend + ?Sized,
{
    let tenant = tenant();
    let ada = Access::one_user(&tenant, "ada");
    let sid = full_session(backend, &ada, "s", &["one", "two", "three"]).await;
    let kept = full_session(backend, &ada, "kept", &["four", "five"]).await;
    // One more append, still waiting to be embedded.
    backend
        .append(
            &ada,
            "s",
            Append {
                messages: vec![NewMessage::new(Role::User, "pending", 2)],
                create: None,
                idempotency_key: None,
            },
        )
        .await
        .unwrap();

    // One of its four messages erased before: the deletion counts the three it removed.
    eraser.erase_message(&ada, "s", 1).await.unwrap();

    let bob = Access::one_user(&tenant, "bob");
    assert_eq!(refusal(eraser.delete_session(&bob, "s").await), not_found());
    let deleted = eraser.delete_session(&ada, "s").await.unwrap();
    assert_eq!(deleted.sid, sid);
    assert_eq!(deleted.messages, 3);

    assert_eq!(backend.session(&ada, "s").await.unwrap(), None);
    assert_eq!(
        refusal(backend.messages(&ada, "s", 0, 10).await),
        not_found()
    );
    assert_eq!(backend.session_ref(sid).await.unwrap(), None);
    let gone = backend
        .deleted_sessions(&[sid, kept].into_iter().collect())
        .await
        .unwrap();
    assert_eq!(gone.into_iter().collect::<Vec<_>>(), [sid]);
    assert!(
        backend
            .vectors(None, 100)
            .await
            .unwrap()
            .iter()
            .all(|v| v.key.session() == kept)
    );
    assert!(
        backend
            .all_messages(None, 100)
            .await
            .unwrap()
            .iter()
            .all(|(key, _)| key.session() == kept)
    );
    for entry in backend.pending_embeddings(100).await.unwrap() {
        assert!(entry.messages.iter().all(|(key, _)| key.session() != sid));
    }

    let again = backend
        .create_session(&ada, Some("s"), owner("ada"))
        .await
        .unwrap();
    assert_eq!(again.message_count, 0);
    let new_sid = backend.session_key(&ada, "s").await.unwrap().unwrap();
    assert_ne!(new_sid, sid);
    assert_eq!(backend.summary(&ada, "s").await.unwrap(), None);
    assert!(backend.runs(&ada, "s", 0, 10).await.unwrap().is_empty());
    eraser.compact().await.unwrap();
}

/// The sessions a user erasure or a retention rule reaches.
pub async fn sessions_by_user_and_by_inactivity<B, E>(backend: &B, eraser: &E)
where
    B: SessionBackend + FeedBackend + ?Sized,
    E: EraserBackend + ?Sized,
{
    let tenant = tenant();
    let operator = Access::tenant_wide(&tenant);
    for (id, user) in [("a", "ada"), ("b", "bob"), ("c", "ada")] {
        backend
            .create_session(&operator, Some(id), owner(user))
            .await
            .unwrap();
        // Distinct activity times.
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let cutoff = Timestamp::now();
    std::thread::sleep(std::time::Duration::from_millis(2));
    backend
        .append(
            &operator,
            "a",
            Append {
                messages: vec![NewMessage::new(Role::User, "later", 1)],
                create: None,
                idempotency_key: None,
            },
        )
        .await
        .unwrap();

    let mut ada = eraser.user_session_ids(&tenant, "ada").await.unwrap();
    ada.sort();
    assert_eq!(ada, ["a", "c"]);
    assert!(
        eraser
            .user_session_ids(&tenant, "nobody")
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        eraser
            .sessions_inactive_before(&tenant, cutoff)
            .await
            .unwrap(),
        ["b", "c"]
    );
    assert!(
        eraser
            .sessions_inactive_before(&self::tenant(), cutoff)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A job is pending from its record until it finishes, then has exactly one receipt, kept
/// under its tenant only.
pub async fn jobs_end_with_one_receipt<B, E>(_backend: &B, eraser: &E)
where
    B: ?Sized,
    E: EraserBackend + ?Sized,
{
    let tenant = tenant();
    let first = eraser.record_job(json!({"erase": "first"})).await.unwrap();
    let second = eraser.record_job(json!({"erase": "second"})).await.unwrap();
    assert_ne!(first, second);
    assert_eq!(eraser.pending_job_count().await.unwrap(), 2);
    let pending: Vec<_> = eraser
        .pending_jobs()
        .await
        .unwrap()
        .into_iter()
        .map(|job| (job.id, job.document))
        .collect();
    assert_eq!(
        pending,
        [
            (first, json!({"erase": "first"})),
            (second, json!({"erase": "second"}))
        ]
    );
    assert_eq!(
        eraser.pending_job(second).await.unwrap(),
        Some(json!({"erase": "second"}))
    );

    let lease = std::time::Duration::from_secs(60);
    assert!(eraser.claim_job(first, "node-a", lease).await.unwrap());
    // The holder renews its own lease.
    assert!(eraser.claim_job(first, "node-a", lease).await.unwrap());
    assert!(
        eraser
            .finish_job(first, &tenant, json!({"receipt": 1}))
            .await
            .unwrap()
    );
    // A second finish (a holder whose lease ran out, finishing after another) keeps the
    // first receipt; a finished job is nobody's to claim.
    assert!(
        !eraser
            .finish_job(first, &tenant, json!({"receipt": "again"}))
            .await
            .unwrap()
    );
    assert!(!eraser.claim_job(first, "node-a", lease).await.unwrap());
    assert!(!eraser.claim_job(first, "node-b", lease).await.unwrap());
    assert_eq!(eraser.pending_job(first).await.unwrap(), None);
    assert_eq!(eraser.pending_job_count().await.unwrap(), 1);
    assert_eq!(
        eraser.receipt(&tenant, first).await.unwrap(),
        Some(json!({"receipt": 1}))
    );
    assert_eq!(eraser.receipt(&self::tenant(), first).await.unwrap(), None);
    assert_eq!(eraser.receipt(&tenant, second).await.unwrap(), None);

    assert!(
        eraser
            .finish_job(second, &tenant, json!({"receipt": 2}))
            .await
            .unwrap()
    );
    assert_eq!(
        eraser.receipts(&tenant, 10).await.unwrap(),
        [json!({"receipt": 2}), json!({"receipt": 1})]
    );
    assert_eq!(
        eraser.receipts(&tenant, 1).await.unwrap(),
        [json!({"receipt": 2})]
    );
    assert!(eraser.pending_jobs().await.unwrap().is_empty());
}
