//! Long-term memories, session memories and episodes (what removes them is the eraser's).

use super::{invalid_id, invalid_input, not_found, refusal, tenant};
use crate::StoreError;
use crate::backend::{MemoryBackend, SessionBackend};
use crate::episodes::{Episode, MAX_LESSON_TEXT, Outcome};
use crate::memories::{MAX_MEMORY_HISTORY, Memory, MemoryKind, ReplacedText};
use crate::model::{Access, Append, NewMessage, NewSession, Role, Timestamp};
use crate::session_memory::SessionMemory;
use crate::snapshot::SessionVersion;

/// One `#[tokio::test]` per conformance case, each on the backend `$open` evaluates to (an
/// async expression is fine: it is evaluated inside the test) behind anything that derefs
/// to a [`MemoryBackend`](crate::backend::MemoryBackend) and a
/// [`SessionBackend`](crate::backend::SessionBackend): memories cite the messages of
/// sessions, which the cases create through it.
#[macro_export]
macro_rules! memory_conformance {
    ($open:expr) => {
        $crate::memory_conformance!(@cases $open;
            remembering_and_reading_back,
            corrections_keep_their_history_and_place,
            revisions_are_checked,
            keyed_memories,
            provenance_is_checked,
            listing_and_paging_memories,
            another_users_memory_is_out_of_reach,
            session_memories_check_the_merged_version,
            episodes_per_user_and_task
        );
    };
    (@cases $open:expr; $($case:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let subject = $open;
                $crate::conformance::memories::$case(&*subject, &*subject).await;
            }
        )*
    };
}

/// One time for everything: orders must come from the backend, not the caller's clock.
fn at() -> Timestamp {
    Timestamp::from_micros(1_700_000_000_000_000)
}

fn memory(tenant: &str, user: &str, text: &str) -> Memory {
    Memory {
        id: 0,
        revision: 0,
        tenant: tenant.into(),
        user_id: user.into(),
        agent_id: None,
        text: text.into(),
        kind: MemoryKind::Fact,
        tags: Vec::new(),
        source: None,
        created_at: at(),
        updated_at: at(),
        history: Vec::new(),
        vector: vec![0.5, -0.25, 1.0, 0.0],
        key: None,
    }
}

fn changed() -> std::mem::Discriminant<StoreError> {
    std::mem::discriminant(&StoreError::MemoryChanged { memory_id: 0 })
}

/// Creates session `session_id` of `user` (agent `agent`) with messages 0 and 1.
async fn conversation(sessions: &dyn SessionBackend, tenant: &str, session_id: &str, user: &str) {
    let append = Append {
        messages: vec![
            NewMessage::new(Role::User, "one", 1),
            NewMessage::new(Role::Assistant, "two", 1),
        ],
        create: Some(NewSession {
            user_id: user.into(),
            agent_id: "agent".into(),
            ..NewSession::default()
        }),
        idempotency_key: None,
    };
    sessions
        .append(&Access::tenant_wide(tenant), session_id, append)
        .await
        .unwrap();
}

async fn version(sessions: &dyn SessionBackend, tenant: &str, session_id: &str) -> SessionVersion {
    sessions
        .snapshot(&Access::tenant_wide(tenant), session_id)
        .await
        .unwrap()
        .expect("the session")
        .version()
}

fn ids(memories: &[Memory]) -> Vec<u64> {
    memories.iter().map(|memory| memory.id).collect()
}

/// A new memory gets a fresh id below 2^53 and revision 1, and reads back as saved, in its
/// tenant only.
pub async fn remembering_and_reading_back(
    backend: &dyn MemoryBackend,
    sessions: &dyn SessionBackend,
) {
    let tenant = tenant();
    conversation(sessions, &tenant, "s", "ada").await;
    let new = Memory {
        agent_id: Some("helper".into()),
        kind: MemoryKind::Preference,
        tags: vec!["food".into(), "tea".into()],
        source: Some(("s".into(), 1)),
        created_at: Timestamp::from_micros(at().as_micros() - 5),
        ..memory(&tenant, "ada", "likes green tea")
    };
    let id = backend
        .put_memory(new.clone(), &Access::one_user(&tenant, "ada"))
        .await
        .unwrap();
    assert!((1..1 << 53).contains(&id), "{id}");
    let stored = backend.memory(&tenant, id).await.unwrap();
    assert_eq!(
        stored,
        Some(Memory {
            id,
            revision: 1,
            ..new.clone()
        })
    );
    let other = backend.put_memory(new, &Access::tenant_wide(&tenant)).await;
    assert_ne!(other.unwrap(), id, "every new memory has an id of its own");
    assert_eq!(backend.memory(&self::tenant(), id).await.unwrap(), None);
    assert_eq!(backend.memory(&tenant, 12_345).await.unwrap(), None);
    assert_eq!(refusal(backend.memory("a/b", id).await), invalid_id());

    for (bad, expected) in [
        (memory(&tenant, "a/b", "x"), invalid_id()),
        (memory("", "ada", "x"), invalid_id()),
        (
            Memory {
                agent_id: Some("with space".into()),
                ..memory(&tenant, "ada", "x")
            },
            invalid_id(),
        ),
        (memory(&tenant, "ada", "nul\0byte"), invalid_input()),
    ] {
        assert_eq!(
            refusal(
                backend
                    .put_memory(bad.clone(), &Access::tenant_wide(&tenant))
                    .await
            ),
            expected,
            "{bad:?}"
        );
    }
    assert_eq!(
        backend.user_memories(&tenant, "ada").await.unwrap().len(),
        2
    );
}

/// A correction replaces the text, keeps the replaced ones with their sources (the newest
/// [`MAX_MEMORY_HISTORY`]), keeps the memory's id and place, counts a revision, and lists
/// the memory under every session it cites.
pub async fn corrections_keep_their_history_and_place(
    backend: &dyn MemoryBackend,
    sessions: &dyn SessionBackend,
) {
    let tenant = tenant();
    let all = Access::tenant_wide(&tenant);
    for session in ["s", "t", "u"] {
        conversation(sessions, &tenant, session, "ann").await;
    }
    let first = backend
        .put_memory(memory(&tenant, "ann", "before"), &all)
        .await
        .unwrap();
    let learnt = Memory {
        source: Some(("s".into(), 0)),
        ..memory(&tenant, "ann", "ann lives in Oslo")
    };
    let id = backend.put_memory(learnt, &all).await.unwrap();
    let last = backend
        .put_memory(memory(&tenant, "ann", "after"), &all)
        .await
        .unwrap();
    for (text, source) in [
        ("ann lives in Rome", ("t", 1)),
        ("ann lives in Lyon", ("u", 0)),
    ] {
        let stored = backend.memory(&tenant, id).await.unwrap().unwrap();
        let mut corrected = stored.clone();
        corrected.history.push(ReplacedText {
            text: stored.text.clone(),
            replaced_at: at(),
            source: stored.source.clone(),
        });
        corrected.text = text.into();
        corrected.source = Some((source.0.into(), source.1));
        corrected.updated_at = Timestamp::from_micros(at().as_micros() + 1);
        assert_eq!(backend.put_memory(corrected, &all).await.unwrap(), id);
    }
    let corrected = backend.memory(&tenant, id).await.unwrap().unwrap();
    assert_eq!(corrected.revision, 3);
    assert_eq!(corrected.text, "ann lives in Lyon");
    assert_eq!(corrected.updated_at.as_micros(), at().as_micros() + 1);
    let history: Vec<_> = corrected
        .history
        .iter()
        .map(|h| (h.text.as_str(), h.source.clone(), h.replaced_at))
        .collect();
    assert_eq!(
        history,
        [
            ("ann lives in Oslo", Some(("s".to_owned(), 0)), at()),
            ("ann lives in Rome", Some(("t".to_owned(), 1)), at()),
        ]
    );
    assert_eq!(
        ids(&backend.user_memories(&tenant, "ann").await.unwrap()),
        [first, id, last],
        "a correction keeps its place"
    );
    for session in ["s", "t", "u"] {
        assert_eq!(
            backend.memories_citing(&tenant, session).await.unwrap(),
            [id],
            "{session}"
        );
    }
    assert!(
        backend
            .memories_citing(&self::tenant(), "s")
            .await
            .unwrap()
            .is_empty()
    );
    // Every citation is of stored text: nothing is orphaned (other cases' may be).
    let orphans = backend.orphaned_citations().await.unwrap();
    assert!(
        orphans.iter().all(|orphan| orphan.tenant != tenant),
        "{orphans:?}"
    );

    // History is only ever appended to: a correction that drops or rewrites it is of a
    // stale copy.
    let rewritten = Memory {
        history: vec![corrected.history[1].clone()],
        ..corrected.clone()
    };
    assert_eq!(
        refusal(backend.put_memory(rewritten, &all).await),
        changed()
    );
    assert_eq!(
        backend.memory(&tenant, id).await.unwrap().as_ref(),
        Some(&corrected)
    );

    // Only the newest replaced texts are kept.
    let many = Memory {
        history: (0..=MAX_MEMORY_HISTORY)
            .map(|n| ReplacedText {
                text: format!("old {n}"),
                replaced_at: at(),
                source: None,
            })
            .collect(),
        ..memory(&tenant, "ann", "now")
    };
    let bounded = backend.put_memory(many, &all).await.unwrap();
    let bounded = backend.memory(&tenant, bounded).await.unwrap().unwrap();
    assert_eq!(bounded.history.len(), MAX_MEMORY_HISTORY);
    assert_eq!(bounded.history[0].text, "old 1");
}

/// An update must name a memory of the same tenant and user at the revision it read; a
/// refused one changes nothing.
pub async fn revisions_are_checked(backend: &dyn MemoryBackend, _sessions: &dyn SessionBackend) {
    let tenant = tenant();
    let all = Access::tenant_wide(&tenant);
    let id = backend
        .put_memory(memory(&tenant, "ada", "v1"), &all)
        .await
        .unwrap();
    let read = backend.memory(&tenant, id).await.unwrap().unwrap();
    let v2 = Memory {
        text: "v2".into(),
        ..read.clone()
    };
    backend.put_memory(v2, &all).await.unwrap();
    let current = backend.memory(&tenant, id).await.unwrap().unwrap();
    assert_eq!((current.text.as_str(), current.revision), ("v2", 2));

    let stale = Memory {
        text: "from a stale copy".into(),
        ..read.clone()
    };
    let other_tenant = self::tenant();
    for (bad, sources) in [
        (stale, all.clone()),
        (
            Memory {
                revision: 3,
                ..current.clone()
            },
            all.clone(),
        ),
        // Another user's memory, or none at all: not to be brought back by an update.
        (
            Memory {
                user_id: "bob".into(),
                ..current.clone()
            },
            all.clone(),
        ),
        (
            Memory {
                tenant: other_tenant.clone(),
                ..current.clone()
            },
            Access::tenant_wide(&other_tenant),
        ),
        (
            Memory {
                id: id ^ 1,
                ..current.clone()
            },
            all.clone(),
        ),
    ] {
        assert_eq!(
            refusal(backend.put_memory(bad.clone(), &sources).await),
            changed(),
            "{bad:?}"
        );
    }
    assert_eq!(backend.memory(&tenant, id).await.unwrap(), Some(current));
    assert!(
        backend
            .user_memories(&tenant, "bob")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        backend
            .user_memories(&other_tenant, "ada")
            .await
            .unwrap()
            .is_empty()
    );
}

/// A key names one memory per user and agent scope: found by it, kept by every update,
/// never taken twice.
pub async fn keyed_memories(backend: &dyn MemoryBackend, _sessions: &dyn SessionBackend) {
    let tenant = tenant();
    let all = Access::tenant_wide(&tenant);
    let keyed = |user: &str, agent: Option<&str>, text: &str| Memory {
        key: Some("pref-drink".into()),
        agent_id: agent.map(str::to_owned),
        ..memory(&tenant, user, text)
    };
    let by_key = |user: &'static str, agent: Option<&'static str>| {
        let tenant = tenant.clone();
        async move {
            backend
                .memory_by_key(&tenant, user, agent, "pref-drink")
                .await
                .unwrap()
        }
    };
    assert_eq!(by_key("ann", None).await, None);
    let id = backend
        .put_memory(keyed("ann", None, "tea"), &all)
        .await
        .unwrap();
    let stored = by_key("ann", None).await.unwrap();
    assert_eq!((stored.id, stored.text.as_str()), (id, "tea"));
    assert_eq!(stored.key.as_deref(), Some("pref-drink"));
    // Per agent scope and per user.
    assert_eq!(by_key("ann", Some("helper")).await, None);
    assert_eq!(by_key("bob", None).await, None);
    let helper = backend
        .put_memory(keyed("ann", Some("helper"), "coffee"), &all)
        .await
        .unwrap();
    assert_eq!(by_key("ann", Some("helper")).await.unwrap().id, helper);
    assert_eq!(by_key("ann", None).await.unwrap().id, id);

    // A second memory under a taken key is refused, naming the one to update instead.
    let taken = backend.put_memory(keyed("ann", None, "water"), &all).await;
    assert!(
        matches!(taken, Err(StoreError::MemoryChanged { memory_id }) if memory_id == id),
        "{taken:?}"
    );
    // An update keeps the key; it may not drop it, change it or move the memory's agent.
    let updated = Memory {
        text: "green tea".into(),
        ..stored.clone()
    };
    backend.put_memory(updated, &all).await.unwrap();
    let current = by_key("ann", None).await.unwrap();
    assert_eq!((current.id, current.text.as_str()), (id, "green tea"));
    for moved in [
        Memory {
            key: None,
            ..current.clone()
        },
        Memory {
            key: Some("other".into()),
            ..current.clone()
        },
        Memory {
            agent_id: Some("elsewhere".into()),
            ..current.clone()
        },
    ] {
        assert_eq!(
            refusal(backend.put_memory(moved.clone(), &all).await),
            invalid_input(),
            "{moved:?}"
        );
    }
    // An unkeyed memory cannot take a key either.
    let plain = backend
        .put_memory(memory(&tenant, "ann", "plain"), &all)
        .await
        .unwrap();
    let plain = backend.memory(&tenant, plain).await.unwrap().unwrap();
    let late = Memory {
        key: Some("late".into()),
        ..plain
    };
    assert_eq!(
        refusal(backend.put_memory(late, &all).await),
        invalid_input()
    );
    let invalid = Memory {
        key: Some("no spaces".into()),
        ..memory(&tenant, "ann", "x")
    };
    assert_eq!(
        refusal(backend.put_memory(invalid, &all).await),
        invalid_id()
    );
    assert_eq!(
        refusal(
            backend
                .memory_by_key(&tenant, "ann", None, "no spaces")
                .await
        ),
        invalid_id()
    );
    assert_eq!(by_key("ann", None).await, Some(current));
}

/// A memory's source is a stored message of a session the caller reaches (a source cited
/// before stays citable), of the memory's tenant.
pub async fn provenance_is_checked(backend: &dyn MemoryBackend, sessions: &dyn SessionBackend) {
    let tenant = tenant();
    let all = Access::tenant_wide(&tenant);
    let ann = Access::one_user(&tenant, "ann");
    conversation(sessions, &tenant, "ann-s", "ann").await;
    conversation(sessions, &tenant, "bob-s", "bob").await;
    let cites = |session: &str, index: u64| Memory {
        source: Some((session.into(), index)),
        ..memory(&tenant, "ann", "cited")
    };
    let session_not_found = not_found();
    let message_not_found = std::mem::discriminant(&StoreError::MessageNotFound { index: 0 });
    for (bad, sources, expected) in [
        (cites("missing", 0), &all, session_not_found),
        (cites("ann-s", 2), &all, message_not_found),
        // A user-scoped caller cites its own sessions only.
        (cites("bob-s", 0), &ann, session_not_found),
    ] {
        assert_eq!(
            refusal(backend.put_memory(bad.clone(), sources).await),
            expected,
            "{bad:?}"
        );
    }
    // Sources of another tenant are no sources.
    let elsewhere = Access::tenant_wide(self::tenant());
    assert_eq!(
        refusal(backend.put_memory(cites("ann-s", 0), &elsewhere).await),
        invalid_input()
    );
    assert!(
        backend
            .user_memories(&tenant, "ann")
            .await
            .unwrap()
            .is_empty()
    );

    let own = backend.put_memory(cites("ann-s", 1), &ann).await.unwrap();
    assert_eq!(
        backend.memory(&tenant, own).await.unwrap().unwrap().source,
        Some(("ann-s".to_owned(), 1))
    );
    // The tenant's operator reaches every session; what it cited stays citable by the user.
    let id = backend.put_memory(cites("bob-s", 0), &all).await.unwrap();
    let stored = backend.memory(&tenant, id).await.unwrap().unwrap();
    let kept = Memory {
        text: "cited, reworded".into(),
        ..stored.clone()
    };
    backend.put_memory(kept, &ann).await.unwrap();
    let current = backend.memory(&tenant, id).await.unwrap().unwrap();
    let moved = Memory {
        source: Some(("bob-s".into(), 1)),
        ..current
    };
    assert_eq!(
        refusal(backend.put_memory(moved, &ann).await),
        session_not_found
    );
    assert_eq!(
        backend.memories_citing(&tenant, "bob-s").await.unwrap(),
        [id]
    );
    assert_eq!(
        backend.memories_citing(&tenant, "ann-s").await.unwrap(),
        [own]
    );
    assert!(
        backend
            .memories_citing(&tenant, "missing")
            .await
            .unwrap()
            .is_empty()
    );
}

/// A user's memories are listed oldest first (in the order saved, whatever their ids and
/// times), paged after a memory of theirs, filtered before the limit counts; every tenant's
/// memories are paged in id order.
pub async fn listing_and_paging_memories(
    backend: &dyn MemoryBackend,
    _sessions: &dyn SessionBackend,
) {
    let tenant = tenant();
    let all = Access::tenant_wide(&tenant);
    let mut saved = Vec::new();
    for (n, agent) in [None, Some("x"), Some("y"), None, Some("x"), Some("y")]
        .into_iter()
        .enumerate()
    {
        let new = Memory {
            agent_id: agent.map(str::to_owned),
            ..memory(&tenant, "ada", &format!("fact {n}"))
        };
        saved.push(backend.put_memory(new, &all).await.unwrap());
    }
    let bobs = backend
        .put_memory(memory(&tenant, "bob", "bob's"), &all)
        .await
        .unwrap();
    let listed = backend.user_memories(&tenant, "ada").await.unwrap();
    assert_eq!(ids(&listed), saved);
    assert_eq!(
        ids(&backend.user_memories(&tenant, "bob").await.unwrap()),
        [bobs]
    );

    let every = |_: &Memory| true;
    let page = |after: Option<u64>, limit: usize| {
        let tenant = tenant.clone();
        async move {
            ids(&backend
                .user_memories_page(&tenant, "ada", after, limit, &every)
                .await
                .unwrap())
        }
    };
    assert_eq!(page(None, 2).await, saved[..2]);
    assert_eq!(page(Some(saved[1]), 3).await, saved[2..5]);
    assert_eq!(page(Some(saved[4]), 3).await, saved[5..]);
    assert!(page(Some(saved[5]), 3).await.is_empty());
    assert!(page(None, 0).await.is_empty());
    // The filter decides before the limit counts: what agent "x" sees.
    let seen_by_x = |memory: &Memory| memory.agent_id.as_deref().is_none_or(|a| a == "x");
    let x_page = backend
        .user_memories_page(&tenant, "ada", Some(saved[0]), 2, &seen_by_x)
        .await
        .unwrap();
    assert_eq!(ids(&x_page), [saved[1], saved[3]]);
    assert_eq!(x_page, [listed[1].clone(), listed[3].clone()]);
    // A cursor must be one of the user's memories.
    let memory_not_found = std::mem::discriminant(&StoreError::MemoryNotFound { id: 0 });
    for after in [bobs, saved[0] ^ 1] {
        assert_eq!(
            refusal(
                backend
                    .user_memories_page(&tenant, "ada", Some(after), 10, &every)
                    .await
            ),
            memory_not_found
        );
    }
    assert_eq!(
        refusal(
            backend
                .user_memories_page(&tenant, "a/b", None, 10, &every)
                .await
        ),
        invalid_id()
    );
    assert_eq!(
        refusal(backend.user_memories(&tenant, "").await),
        invalid_id()
    );

    // Every tenant's memories in id order, in pages: other cases' are there too; this
    // tenant's are all found, once, in id order.
    let mut mine: Vec<u64> = saved.iter().copied().chain([bobs]).collect();
    mine.sort_unstable();
    let mut found = Vec::new();
    let mut after = mine[0] - 1;
    loop {
        let page = backend.memories_after(after, 3).await.unwrap();
        assert!(page.len() <= 3);
        assert!(page.windows(2).all(|w| w[0].id < w[1].id));
        let Some(last) = page.last() else { break };
        assert!(page[0].id > after);
        after = last.id;
        found.extend(
            page.into_iter()
                .filter(|m| m.tenant == tenant)
                .map(|m| m.id),
        );
        if after >= mine[mine.len() - 1] {
            break;
        }
    }
    assert_eq!(found, mine);
}

/// What reaches one user's memories or episodes reaches no other user's, and no other
/// tenant's.
pub async fn another_users_memory_is_out_of_reach(
    backend: &dyn MemoryBackend,
    _sessions: &dyn SessionBackend,
) {
    let tenant = tenant();
    let all = Access::tenant_wide(&tenant);
    let keyed = Memory {
        key: Some("k".into()),
        ..memory(&tenant, "ada", "ada's")
    };
    let id = backend.put_memory(keyed, &all).await.unwrap();
    let episode = backend
        .put_episode(episode(&tenant, "ada", "refund", "ada's lesson"))
        .await
        .unwrap();
    let other = self::tenant();

    assert!(
        backend
            .user_memories(&tenant, "bob")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        backend
            .user_memories(&other, "ada")
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(backend.memory(&other, id).await.unwrap(), None);
    assert_eq!(
        backend
            .memory_by_key(&tenant, "bob", None, "k")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        backend
            .memory_by_key(&other, "ada", None, "k")
            .await
            .unwrap(),
        None
    );
    let every = |_: &Memory| true;
    assert_eq!(
        refusal(
            backend
                .user_memories_page(&tenant, "bob", Some(id), 10, &every)
                .await
        ),
        std::mem::discriminant(&StoreError::MemoryNotFound { id: 0 })
    );
    // Bob updating it as his, or the other tenant as theirs, is refused.
    let stored = backend.memory(&tenant, id).await.unwrap().unwrap();
    let as_bob = Memory {
        user_id: "bob".into(),
        text: "bob's now".into(),
        ..stored.clone()
    };
    assert_eq!(refusal(backend.put_memory(as_bob, &all).await), changed());
    assert_eq!(backend.memory(&tenant, id).await.unwrap(), Some(stored));

    assert_eq!(backend.episode(&other, episode).await.unwrap(), None);
    assert!(
        backend
            .user_episodes(&tenant, "bob")
            .await
            .unwrap()
            .is_empty()
    );
    let every = |_: &Episode| true;
    assert!(
        backend
            .recent_episodes(&tenant, "bob", "refund", 10, &every)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        backend
            .recent_episodes(&other, "ada", "refund", 10, &every)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        backend
            .session_memory(&tenant, "bob", "agent")
            .await
            .unwrap(),
        None
    );
}

/// A session memory is saved per user and agent only if every session merged into it is
/// still the user's and the one just merged is still at the version read.
pub async fn session_memories_check_the_merged_version(
    backend: &dyn MemoryBackend,
    sessions: &dyn SessionBackend,
) {
    let tenant = tenant();
    for (session, user) in [("s1", "ann"), ("s2", "ann"), ("bob-s", "bob")] {
        conversation(sessions, &tenant, session, user).await;
    }
    let summary = |text: &str, merged: &[&str]| SessionMemory {
        text: text.into(),
        sessions: merged.iter().map(|s| (*s).to_owned()).collect(),
        updated_at: at(),
    };
    assert_eq!(
        backend.session_memory(&tenant, "ann", "a").await.unwrap(),
        None
    );
    let (v1, v2) = (
        version(sessions, &tenant, "s1").await,
        version(sessions, &tenant, "s2").await,
    );
    let first = summary("s1 only", &["s1"]);
    backend
        .put_session_memory(&tenant, "ann", "a", first.clone(), ("s1", v1))
        .await
        .unwrap();
    assert_eq!(
        backend.session_memory(&tenant, "ann", "a").await.unwrap(),
        Some(first.clone())
    );
    let both = summary("s1 and s2", &["s1", "s2"]);
    backend
        .put_session_memory(&tenant, "ann", "a", both.clone(), ("s2", v2))
        .await
        .unwrap();
    assert_eq!(
        backend.session_memory(&tenant, "ann", "a").await.unwrap(),
        Some(both)
    );
    // Per agent and per user.
    assert_eq!(
        backend.session_memory(&tenant, "ann", "b").await.unwrap(),
        None
    );
    assert_eq!(
        backend.session_memory(&tenant, "bob", "a").await.unwrap(),
        None
    );

    // A version counts what was erased from a session, not what was appended: a merge of
    // what s2 held when read is still of text s2 holds.
    sessions
        .append(
            &Access::tenant_wide(&tenant),
            "s2",
            Append {
                messages: vec![NewMessage::new(Role::User, "three", 1)],
                create: None,
                idempotency_key: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(version(sessions, &tenant, "s2").await, v2);
    let later = summary("s1 and s2, merged again", &["s1", "s2"]);
    backend
        .put_session_memory(&tenant, "ann", "a", later.clone(), ("s2", v2))
        .await
        .unwrap();
    let session_changed = std::mem::discriminant(&StoreError::SessionChanged {
        session_id: String::new(),
    });
    let late = summary("s1 and an old s2", &["s1", "s2"]);
    // The version of another session is another state.
    assert_eq!(
        refusal(
            backend
                .put_session_memory(&tenant, "ann", "a", late.clone(), ("s1", v2))
                .await
        ),
        session_changed
    );
    // Every merged session must be the user's.
    for merged in [&["s1", "bob-s"][..], &["missing", "s1"][..]] {
        assert_eq!(
            refusal(
                backend
                    .put_session_memory(&tenant, "ann", "a", summary("x", merged), ("s1", v1))
                    .await
            ),
            not_found(),
            "{merged:?}"
        );
    }
    assert_eq!(
        backend.session_memory(&tenant, "ann", "a").await.unwrap(),
        Some(later),
        "nothing refused was saved"
    );
    assert_eq!(
        refusal(
            backend
                .put_session_memory(&tenant, "ann", "a/b", first.clone(), ("s1", v1))
                .await
        ),
        invalid_id()
    );
    assert_eq!(
        refusal(
            backend
                .put_session_memory(&tenant, "ann", "a", summary("nul\0", &["s1"]), ("s1", v1))
                .await
        ),
        invalid_input()
    );
    assert_eq!(
        refusal(backend.session_memory(&tenant, "", "a").await),
        invalid_id()
    );
}

fn episode(tenant: &str, user: &str, task_type: &str, lesson: &str) -> Episode {
    Episode {
        id: 0,
        tenant: tenant.into(),
        user_id: user.into(),
        agent_id: None,
        task_type: task_type.into(),
        description: "tried something".into(),
        outcome: Outcome::Failure,
        reflection: String::new(),
        lesson: lesson.into(),
        standing: false,
        source_session: None,
        created_at: at(),
    }
}

/// Episodes are listed per user oldest first, and per task type newest first, filtered (by
/// agent, say) before the limit counts; a source session must be the user's own.
pub async fn episodes_per_user_and_task(
    backend: &dyn MemoryBackend,
    sessions: &dyn SessionBackend,
) {
    let tenant = tenant();
    conversation(sessions, &tenant, "ann-s", "ann").await;
    conversation(sessions, &tenant, "bob-s", "bob").await;
    let mut saved = Vec::new();
    for (task, lesson, agent) in [
        ("refund", "one", None),
        ("refund", "two", Some("a")),
        ("upgrade", "three", None),
        ("refund", "four", Some("b")),
        ("refund", "five", None),
    ] {
        let new = Episode {
            agent_id: agent.map(str::to_owned),
            outcome: Outcome::Success,
            reflection: "it went well".into(),
            standing: lesson == "three",
            source_session: (lesson == "five").then(|| "ann-s".to_owned()),
            ..episode(&tenant, "ann", task, lesson)
        };
        let id = backend.put_episode(new.clone()).await.unwrap();
        assert!((1..1 << 53).contains(&id), "{id}");
        saved.push(Episode { id, ..new });
    }
    backend
        .put_episode(episode(&tenant, "bob", "refund", "bob's"))
        .await
        .unwrap();

    assert_eq!(backend.user_episodes(&tenant, "ann").await.unwrap(), saved);
    assert_eq!(
        backend.episode(&tenant, saved[1].id).await.unwrap(),
        Some(saved[1].clone())
    );
    let lessons = |found: Vec<Episode>| found.into_iter().map(|e| e.lesson).collect::<Vec<_>>();
    let every = |_: &Episode| true;
    assert_eq!(
        lessons(
            backend
                .recent_episodes(&tenant, "ann", "refund", 2, &every)
                .await
                .unwrap()
        ),
        ["five", "four"]
    );
    assert_eq!(
        lessons(
            backend
                .recent_episodes(&tenant, "ann", "refund", 10, &every)
                .await
                .unwrap()
        ),
        ["five", "four", "two", "one"]
    );
    // What agent "a" learns from: its own episodes and every agent's.
    let seen_by_a = |e: &Episode| e.agent_id.as_deref().is_none_or(|agent| agent == "a");
    assert_eq!(
        lessons(
            backend
                .recent_episodes(&tenant, "ann", "refund", 2, &seen_by_a)
                .await
                .unwrap()
        ),
        ["five", "two"]
    );
    assert!(
        backend
            .recent_episodes(&tenant, "ann", "missing", 10, &every)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        backend
            .recent_episodes(&tenant, "ann", "refund", 0, &every)
            .await
            .unwrap()
            .is_empty()
    );

    // A source session must be one of the user's own.
    for session in ["bob-s", "missing"] {
        let foreign = Episode {
            source_session: Some(session.into()),
            ..episode(&tenant, "ann", "refund", "stolen")
        };
        assert_eq!(
            refusal(backend.put_episode(foreign).await),
            not_found(),
            "{session}"
        );
    }
    for (bad, expected) in [
        (episode(&tenant, "ann", "refund", " "), invalid_input()),
        (episode(&tenant, "ann", "no spaces", "x"), invalid_id()),
        (
            episode(&tenant, "ann", "refund", &"x".repeat(MAX_LESSON_TEXT + 1)),
            invalid_input(),
        ),
        (
            Episode {
                description: String::new(),
                ..episode(&tenant, "ann", "refund", "x")
            },
            invalid_input(),
        ),
        (episode(&tenant, "a/b", "refund", "x"), invalid_id()),
    ] {
        assert_eq!(
            refusal(backend.put_episode(bad.clone()).await),
            expected,
            "{bad:?}"
        );
    }
    assert_eq!(backend.user_episodes(&tenant, "ann").await.unwrap(), saved);
    assert_eq!(
        refusal(
            backend
                .recent_episodes(&tenant, "ann", "no spaces", 1, &every)
                .await
        ),
        invalid_id()
    );
}
