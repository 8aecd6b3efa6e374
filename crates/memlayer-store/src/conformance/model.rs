//! The store against a model: random programs of concurrent appends (some under idempotency
//! keys, retried by several clients at once), message erasures and session deletions, each
//! step checked against what a map of sessions to messages says must be stored.
//!
//! What the model holds a backend to: every acknowledged message is stored at the index it
//! was given, exactly once, until it is erased; indices are dense, never reused within a
//! session, and a client's later append lands after its earlier one; one idempotency key
//! writes once, every other send of it answers the first result; an erased message or a
//! deleted session is gone, and a session created again under the same id starts afresh
//! (indices and idempotency keys included); nobody else's access sees any of it.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use super::{not_found, refusal, tenant};
use crate::backend::{EraserBackend, SessionBackend};
use crate::model::{Access, Append, Appended, NewMessage, NewSession, Role};

/// A `#[test]` running random programs against the model, each on a store of its own:
/// `$subject` is bound to what `$open` evaluates to (an async expression is fine; behind
/// anything that derefs to a [`SessionBackend`]), `$eraser` is then evaluated to its eraser.
#[macro_export]
macro_rules! model_conformance {
    ($subject:ident = $open:expr, $eraser:expr) => {
        #[test]
        fn random_programs_agree_with_the_model() {
            $crate::conformance::model::check(|program| async move {
                let $subject = $open;
                let eraser = $eraser;
                $crate::conformance::model::run(&*$subject, &eraser, program).await
            });
        }
    };
}

/// Sessions the programs use: "s0" and "s1" are ada's, "s2" is bob's.
const SESSIONS: usize = 3;

/// Idempotency keys per session; key `k` always sends the same `k + 1` messages.
const KEYS: u8 = 3;

/// One append a client sends.
#[derive(Debug, Clone)]
pub struct Send {
    session: usize,
    /// Under idempotency key `k` (its body is fixed by the key), or a fresh body of `n` messages.
    body: Body,
}

#[derive(Debug, Clone)]
enum Body {
    Keyed(u8),
    Fresh(usize),
}

/// One step of a program.
#[derive(Debug, Clone)]
pub enum Step {
    /// Clients sending at once, each its appends one after another.
    Appends(Vec<Vec<Send>>),
    /// Erasing the message at `index` of a session (it may be erased already, or beyond
    /// the last).
    Erase { session: usize, index: u64 },
    /// Deleting a session, which may not exist.
    Delete { session: usize },
}

fn arb_step() -> impl Strategy<Value = Step> {
    let send = (
        0..SESSIONS,
        prop_oneof![
            (0..KEYS).prop_map(Body::Keyed),
            (1..4usize).prop_map(Body::Fresh)
        ],
    )
        .prop_map(|(session, body)| Send { session, body });
    let clients = proptest::collection::vec(proptest::collection::vec(send, 1..5), 1..5);
    prop_oneof![
        4 => clients.prop_map(Step::Appends),
        2 => (0..SESSIONS, 0..12u64).prop_map(|(session, index)| Step::Erase { session, index }),
        1 => (0..SESSIONS).prop_map(|session| Step::Delete { session }),
    ]
}

/// Runs random programs (each on a store `case` opens) and panics with the smallest
/// failing one.
pub fn check<F, Fut>(case: F)
where
    F: Fn(Vec<Step>) -> Fut,
    Fut: Future<Output = Result<(), TestCaseError>>,
{
    let mut runner = TestRunner::new(Config {
        cases: 16,
        ..Config::default()
    });
    let outcome = runner.run(&proptest::collection::vec(arb_step(), 1..10), |program| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(case(program))
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
}

/// What the model says one session holds.
#[derive(Debug, Default)]
struct Session {
    /// Which creation of a session of this id it is, for keyed bodies unique across them.
    generation: u32,
    /// The index the next message gets.
    next: u64,
    /// The stored messages' contents by index.
    messages: BTreeMap<u64, String>,
    /// Each idempotency key's first result (first index, count).
    keys: BTreeMap<u8, (u64, u64)>,
}

/// Runs one program against a fresh tenant of `backend`.
pub async fn run<B, E>(backend: &B, eraser: &E, program: Vec<Step>) -> Result<(), TestCaseError>
where
    B: SessionBackend + ?Sized,
    E: EraserBackend + ?Sized,
{
    let tenant = tenant();
    let owners = ["ada", "ada", "bob"];
    let access: Vec<_> = owners
        .iter()
        .map(|user| Access::one_user(&tenant, *user))
        .collect();
    let mut model: Vec<Option<Session>> = (0..SESSIONS).map(|_| None).collect();
    // How many times each session was created.
    let mut generations = [0u32; SESSIONS];
    for (number, step) in program.into_iter().enumerate() {
        match step {
            Step::Appends(clients) => {
                // A key's body names the session's generation: the one it has, or the one
                // this step creates.
                let generation: Vec<u32> = (0..SESSIONS)
                    .map(|s| {
                        model[s]
                            .as_ref()
                            .map_or(generations[s] + 1, |s| s.generation)
                    })
                    .collect();
                let sends = clients.iter().enumerate().map(|(client, sends)| {
                    let access = &access;
                    let generation = &generation;
                    async move {
                        let mut answers = Vec::new();
                        for (op, send) in sends.iter().enumerate() {
                            let generation = generation[send.session];
                            let contents = match send.body {
                                Body::Keyed(key) => (0..=key)
                                    .map(|i| format!("g{generation}-k{key}-m{i}"))
                                    .collect(),
                                Body::Fresh(count) => (0..count)
                                    .map(|i| format!("step{number}-c{client}-op{op}-m{i}"))
                                    .collect::<Vec<_>>(),
                            };
                            let append = Append {
                                messages: contents
                                    .iter()
                                    .map(|text| NewMessage::new(Role::User, text, 1))
                                    .collect(),
                                create: Some(NewSession {
                                    user_id: owners[send.session].into(),
                                    agent_id: "agent".into(),
                                    ..NewSession::default()
                                }),
                                idempotency_key: match send.body {
                                    Body::Keyed(key) => Some(format!("key-{key}")),
                                    Body::Fresh(_) => None,
                                },
                            };
                            let session_id = format!("s{}", send.session);
                            let appended = backend
                                .append(&access[send.session], &session_id, append)
                                .await;
                            answers.push((send.clone(), contents, appended));
                        }
                        answers
                    }
                });
                let answers = futures_util::future::join_all(sends).await;
                apply_appends(&mut model, &mut generations, answers)?;
            }
            Step::Erase { session, index } => {
                let erased = eraser
                    .erase_message(&access[session], &format!("s{session}"), index)
                    .await;
                match &mut model[session] {
                    None => prop_assert_eq!(refusal(erased), not_found()),
                    Some(stored) => {
                        let erased = erased.map_err(|err| {
                            TestCaseError::fail(format!("erasing s{session}/{index}: {err}"))
                        })?;
                        let was_stored = stored.messages.remove(&index).is_some();
                        prop_assert_eq!(erased.message, was_stored, "s{}/{}", session, index);
                    }
                }
            }
            Step::Delete { session } => {
                let deleted = eraser
                    .delete_session(&access[session], &format!("s{session}"))
                    .await;
                match model[session].take() {
                    None => prop_assert_eq!(refusal(deleted), not_found()),
                    Some(_) => {
                        deleted.map_err(|err| {
                            TestCaseError::fail(format!("deleting s{session}: {err}"))
                        })?;
                    }
                }
            }
        }
        compare(backend, &tenant, &access, &model).await?;
    }
    Ok(())
}

/// One client's answers: what it sent, the contents, and the store's answer.
type Answers = Vec<(Send, Vec<String>, crate::Result<Appended>)>;

/// Checks one round of concurrent appends against the model and adds what they wrote.
fn apply_appends(
    model: &mut [Option<Session>],
    generations: &mut [u32; SESSIONS],
    clients: Vec<Answers>,
) -> Result<(), TestCaseError> {
    // The appends that wrote, by session and first index, and the ones that replayed.
    let mut written: BTreeMap<(usize, u64), Write> = BTreeMap::new();
    let mut replays = Vec::new();
    for answers in clients {
        // A client sends after its previous answer: its next write lands after it.
        let mut last_written: BTreeMap<usize, u64> = BTreeMap::new();
        for (send, contents, appended) in answers {
            let appended = appended
                .map_err(|err| TestCaseError::fail(format!("appending {send:?} failed: {err}")))?;
            prop_assert_eq!(appended.count, contents.len() as u64);
            if appended.replayed {
                replays.push((send, appended));
                continue;
            }
            if let Some(previous) = last_written.insert(send.session, appended.first_index) {
                prop_assert!(
                    previous < appended.first_index,
                    "a client's appends reordered"
                );
            }
            let at = (send.session, appended.first_index);
            let write = Write {
                key: match send.body {
                    Body::Keyed(key) => Some(key),
                    Body::Fresh(_) => None,
                },
                contents,
                created: appended.created_session,
            };
            prop_assert!(
                written.insert(at, write).is_none(),
                "index {:?} given twice",
                at
            );
        }
    }
    for (session, state) in model.iter_mut().enumerate() {
        let writes: Vec<_> = written
            .range((session, 0)..(session + 1, 0))
            .map(|(&(_, first), write)| (first, write))
            .collect();
        let created = writes.iter().filter(|(_, write)| write.created).count();
        if state.is_some() {
            prop_assert_eq!(created, 0, "s{} created again while it exists", session);
        } else if writes.is_empty() {
            continue;
        } else {
            prop_assert_eq!(created, 1, "s{} created {} times", session, created);
            prop_assert!(writes[0].1.created, "s{} created by a later write", session);
            generations[session] += 1;
        }
        let state = state.get_or_insert_with(|| Session {
            generation: generations[session],
            ..Session::default()
        });
        for (first, write) in writes {
            prop_assert_eq!(first, state.next, "s{} has a gap or an overlap", session);
            let count = write.contents.len() as u64;
            if let Some(key) = write.key {
                prop_assert!(
                    state.keys.insert(key, (first, count)).is_none(),
                    "key {} of s{} wrote twice",
                    key,
                    session
                );
            }
            for (index, content) in (first..).zip(&write.contents) {
                state.messages.insert(index, content.clone());
            }
            state.next += count;
        }
    }
    for (send, appended) in replays {
        let Body::Keyed(key) = send.body else {
            return Err(TestCaseError::fail("an append without a key replayed"));
        };
        let first = model[send.session]
            .as_ref()
            .and_then(|session| session.keys.get(&key).copied());
        prop_assert_eq!(
            Some((appended.first_index, appended.count)),
            first,
            "key {} of s{} replayed another result",
            key,
            send.session
        );
    }
    Ok(())
}

/// An append that wrote.
struct Write {
    key: Option<u8>,
    contents: Vec<String>,
    created: bool,
}

/// Every session as the backend stores it equals the model's, and nobody else's access
/// reaches it.
async fn compare<B: SessionBackend + ?Sized>(
    backend: &B,
    tenant: &str,
    access: &[Access],
    model: &[Option<Session>],
) -> Result<(), TestCaseError> {
    let eve = Access::one_user(tenant, "eve");
    for (session, expected) in model.iter().enumerate() {
        let id = format!("s{session}");
        prop_assert_eq!(
            refusal(backend.messages(&eve, &id, 0, usize::MAX).await),
            not_found()
        );
        let stored = backend.session(&access[session], &id).await;
        let stored = stored.map_err(|err| TestCaseError::fail(format!("{id}: {err}")))?;
        let Some(expected) = expected else {
            prop_assert!(stored.is_none(), "{} exists", id);
            continue;
        };
        let stored = stored.ok_or_else(|| TestCaseError::fail(format!("{id} is missing")))?;
        prop_assert_eq!(stored.message_count, expected.next, "{}", id);
        let messages = backend
            .messages(&access[session], &id, 0, usize::MAX)
            .await
            .map_err(|err| TestCaseError::fail(format!("{id}: {err}")))?;
        let messages: BTreeMap<u64, String> = messages
            .into_iter()
            .map(|message| (message.index, message.content))
            .collect();
        prop_assert_eq!(&messages, &expected.messages, "{}", id);
    }
    Ok(())
}
