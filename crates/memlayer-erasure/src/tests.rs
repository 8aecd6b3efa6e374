//! Erasure end to end over a real store, the real indexes and the real embedding model
//! (installed by `cargo xtask setup`): canaries gone from every API and every file byte,
//! interrupted jobs finished on resume, and random erasures checked against a model of what
//! must remain.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use memlayer_embed::{Embedder, EmbedderOptions};
use memlayer_index::{Recall, RecallOptions, RecallQuery, Scope};
use memlayer_memory::{DEFAULT_RESIDENT_MEMORIES, LongTermMemory, MemoryQuery, RememberRequest};
use memlayer_store::{
    Access, Append, Episode, MemoryKind, NewMessage, NewSession, Outcome, Role, Store, Timestamp,
};
use proptest::prelude::*;
use tokio::sync::oneshot;

use crate::{Coordinator, ErasureRequest, Status, Target, scan_files};

const TENANT: &str = "t";

/// An embedder of its own: the tests count its cache's hits and misses.
fn embedder() -> Embedder {
    let assets = memlayer_embed::test_support::assets();
    Embedder::open(&assets, EmbedderOptions::default()).unwrap()
}

struct Fixture {
    dir: tempfile::TempDir,
    store: Store,
    recall: Recall,
    memories: LongTermMemory,
    coordinator: Coordinator,
    stop: Option<oneshot::Sender<()>>,
    pipeline: Option<tokio::task::JoinHandle<()>>,
}

impl Fixture {
    fn open(dir: tempfile::TempDir, embedder: Embedder) -> Self {
        let options = RecallOptions::default().with_snapshot(dir.path().join("vectors.idx"));
        Self::assemble(dir, embedder, options, true)
    }

    /// A fixture whose embedding pipeline never runs, so every append stays in its backlog,
    /// and a recall waits an hour for it.
    fn without_pipeline(dir: tempfile::TempDir, embedder: Embedder) -> Self {
        let mut options = RecallOptions::default().with_snapshot(dir.path().join("vectors.idx"));
        options.read_your_writes_wait = Duration::from_secs(3600);
        Self::assemble(dir, embedder, options, false)
    }

    fn assemble(
        dir: tempfile::TempDir,
        embedder: Embedder,
        options: RecallOptions,
        run_pipeline: bool,
    ) -> Self {
        let store = Store::open(dir.path().join("memlayer.redb")).unwrap();
        let recall = Recall::open(store.clone(), embedder.clone(), options).unwrap();
        let memories = LongTermMemory::open(store.clone(), embedder, DEFAULT_RESIDENT_MEMORIES);
        let (stop, stopped) = oneshot::channel::<()>();
        let pipeline = run_pipeline.then(|| {
            tokio::spawn(recall.clone().run_pipeline(async {
                let _ = stopped.await;
            }))
        });
        Self {
            coordinator: Coordinator::new(
                store.take_eraser().unwrap(),
                recall.clone(),
                memories.clone(),
                memlayer_memory::FactCache::default(),
                "erasure-tests".to_owned(),
            ),
            memories,
            dir,
            store,
            recall,
            stop: Some(stop),
            pipeline,
        }
    }

    async fn close(mut self) -> tempfile::TempDir {
        let _ = self.stop.take().unwrap().send(());
        if let Some(pipeline) = self.pipeline.take() {
            pipeline.await.unwrap();
        }
        self.store.shutdown();
        self.dir
    }

    fn files(&self) -> [PathBuf; 2] {
        [
            self.dir.path().join("memlayer.redb"),
            self.dir.path().join("vectors.idx"),
        ]
    }

    /// Occurrences of `text` in the store and index files.
    fn in_files(&self, text: &str) -> usize {
        let files = self.files();
        let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
        scan_files(&paths, text.as_bytes()).unwrap().len()
    }

    async fn say(&self, session: &str, user: &str, lines: &[(Role, String)]) {
        let messages = lines
            .iter()
            .map(|(role, content)| NewMessage::new(*role, content.clone(), 1))
            .collect();
        let append = Append {
            messages,
            create: Some(NewSession {
                user_id: user.into(),
                agent_id: "assistant".into(),
                ..NewSession::default()
            }),
            idempotency_key: None,
        };
        self.store
            .sessions()
            .append(&Access::tenant_wide(TENANT), session, append)
            .await
            .unwrap();
    }

    /// Waits until the pipeline indexed everything and saved nothing stale. Each wait is
    /// bounded by the read-your-writes wait (2 s), which a busy machine's embedding of a
    /// fixture's appends can outlast: wait again, up to a minute.
    async fn settle(&self) {
        let mut waits = 0;
        while let Some(behind) = self.recall.wait_for_index().await.unwrap() {
            waits += 1;
            assert!(waits < 30, "not indexed after {waits} waits: {behind}");
        }
    }

    /// Contents recall finds for `query` among the user's sessions.
    async fn recalled(&self, user: &str, query: &str) -> Vec<String> {
        self.recall
            .recall(RecallQuery {
                access: Access::tenant_wide(TENANT),
                scope: Scope::User {
                    user_id: user.into(),
                    agent_id: None,
                },
                query: query.into(),
                k: 50,
                roles: None,
                after: None,
                before: None,
                exclude: None,
            })
            .await
            .unwrap()
            .hits
            .into_iter()
            .map(|hit| hit.message.content)
            .collect()
    }

    async fn erase(&self, target: Target) -> crate::Receipt {
        self.coordinator
            .erase(ErasureRequest {
                tenant: TENANT.into(),
                target,
                requested_by: "test".into(),
                user_id: None,
            })
            .await
            .unwrap()
    }
}

fn lines(items: &[(Role, &str)]) -> Vec<(Role, String)> {
    items.iter().map(|(r, c)| (*r, (*c).to_owned())).collect()
}

/// The embedder's cache is kept per tenant, for long-term memories too: a text one tenant
/// remembered is embedded again when another asks for it, so no tenant learns by a faster
/// answer what another remembered. An erasure empties the erasing tenant's part of the cache
/// (its erased texts were embedded there, and only there) and leaves the others': emptying
/// theirs would let them notice by their own slower answers that someone erased something.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedding_cache_is_per_tenant_and_an_erasure_empties_its_own_part() {
    let fixture = Fixture::open(tempfile::tempdir().unwrap(), embedder());
    let text = "Dana's blood type is AB negative";
    let (memory, _) = fixture
        .memories
        .remember(RememberRequest {
            access: Access::tenant_wide(TENANT),
            user_id: "dana".into(),
            agent_id: None,
            text: text.into(),
            kind: MemoryKind::Fact,
            tags: Vec::new(),
            source: None,
            key: None,
        })
        .await
        .unwrap();
    let asked_by = |tenant: &str| MemoryQuery {
        tenant: tenant.into(),
        user_id: "dana".into(),
        agent_id: None,
        query: text.into(),
        k: 3,
        kinds: None,
        tags: None,
    };
    // (hits, misses) of one recall of the remembered text by `tenant`.
    let recall_counts = |tenant: &'static str| {
        let (memories, recall) = (fixture.memories.clone(), fixture.recall.clone());
        async move {
            let before = recall.embedder().cache_stats();
            memories.recall(asked_by(tenant)).await.unwrap();
            let after = recall.embedder().cache_stats();
            (after.hits - before.hits, after.misses - before.misses)
        }
    };
    assert_eq!(
        recall_counts("other").await,
        (0, 1),
        "another tenant: a miss"
    );
    assert_eq!(recall_counts(TENANT).await, (1, 0), "its own tenant: a hit");
    assert_eq!(recall_counts("other").await, (1, 0));

    fixture
        .erase(Target::Memory {
            memory_id: memory.id,
        })
        .await;
    assert_eq!(
        recall_counts(TENANT).await,
        (0, 1),
        "emptied by the erasure"
    );
    assert_eq!(
        recall_counts("other").await,
        (1, 0),
        "another tenant's part is kept"
    );
    fixture.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canaries_leave_every_api_and_every_file_byte() {
    let fixture = Fixture::open(tempfile::tempdir().unwrap(), embedder());
    let message_canary = "canary-msg-5b1e77d0 my locker code is 4471";
    let session_canary = "canary-session-c93a02f1 the vault password is tangerine";
    let user_canary = "canary-user-0e4d8a6b my passport number is X99812";
    fixture
        .say(
            "alice-1",
            "alice",
            &lines(&[
                (Role::User, "Hello, I need help with my gym membership."),
                (Role::Assistant, "Sure, what is the problem?"),
                (Role::User, message_canary),
                (Role::Assistant, "Noted."),
            ]),
        )
        .await;
    fixture
        .say("alice-2", "alice", &lines(&[(Role::User, session_canary)]))
        .await;
    fixture
        .say("alice-3", "alice", &lines(&[(Role::User, user_canary)]))
        .await;
    fixture
        .say(
            "bob-1",
            "bob",
            &lines(&[(Role::User, "Bob keeps his bike in locker 12.")]),
        )
        .await;
    // A summary that carries the canary, as a summarised context would have persisted it.
    fixture
        .store
        .sessions()
        .save_summary(
            &Access::tenant_wide(TENANT),
            "alice-1",
            fixture
                .store
                .sessions()
                .snapshot(&Access::tenant_wide(TENANT), "alice-1")
                .unwrap()
                .unwrap()
                .version(),
            format!("[Conversation Summary] (messages 0–2)\n- User: {message_canary}"),
            0,
            2,
        )
        .await
        .unwrap();
    // Long-term memories: one remembered from the canary message, one about the user.
    let remember = |text: &str, source: Option<(String, u64)>| RememberRequest {
        access: Access::tenant_wide(TENANT),
        user_id: "alice".into(),
        agent_id: None,
        text: text.into(),
        kind: MemoryKind::Fact,
        tags: Vec::new(),
        source,
        key: None,
    };
    fixture
        .memories
        .remember(remember(
            "canary-mem-91ab locker code 4471",
            Some(("alice-1".into(), 2)),
        ))
        .await
        .unwrap();
    fixture
        .memories
        .remember(remember("canary-mem-77cd owns a red bicycle", None))
        .await
        .unwrap();
    fixture.settle().await;
    // A message is stored sealed (its erasure destroys its key: memlayer-store's tests); a
    // memory is plain, its bytes in the file until the erasure's compaction.
    assert_eq!(fixture.in_files("canary-msg-5b1e77d0"), 0);
    assert!(fixture.in_files("canary-mem-91ab") > 0);
    assert!(
        fixture
            .recalled("alice", "locker code")
            .await
            .iter()
            .any(|c| c == message_canary)
    );

    // One message: gone from store, summary, indexes and every byte of both files.
    let receipt = fixture
        .erase(Target::Message {
            session_id: "alice-1".into(),
            index: 2,
        })
        .await;
    assert_eq!(
        (
            receipt.counts.messages,
            receipt.counts.vectors,
            receipt.counts.summaries
        ),
        (1, 1, 1)
    );
    assert_eq!(fixture.in_files("canary-msg-5b1e77d0"), 0);
    assert_eq!(
        receipt.counts.memories, 1,
        "the memory derived from the message goes too"
    );
    assert_eq!(fixture.in_files("canary-mem-91ab"), 0);
    assert!(
        !fixture
            .recalled("alice", "locker code")
            .await
            .iter()
            .any(|c| c.contains("canary-msg"))
    );
    assert_eq!(
        fixture
            .store
            .sessions()
            .summary(&Access::tenant_wide(TENANT), "alice-1")
            .unwrap(),
        None
    );
    let rest: Vec<String> = fixture
        .store
        .sessions()
        .messages(&Access::tenant_wide(TENANT), "alice-1", 0, 100)
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert_eq!(
        rest,
        [
            "Hello, I need help with my gym membership.",
            "Sure, what is the problem?",
            "Noted."
        ]
    );

    // A session, then the user: everything of theirs, nothing of Bob's.
    fixture
        .erase(Target::Session {
            session_id: "alice-2".into(),
        })
        .await;
    assert_eq!(fixture.in_files("canary-session-c93a02f1"), 0);
    let receipt = fixture
        .erase(Target::User {
            user_id: "alice".into(),
        })
        .await;
    assert_eq!(receipt.counts.sessions, 2);
    assert_eq!(receipt.counts.memories, 1);
    assert_eq!(fixture.in_files("canary-mem-77cd"), 0);
    let left = fixture
        .memories
        .recall(MemoryQuery {
            tenant: TENANT.into(),
            user_id: "alice".into(),
            agent_id: None,
            query: "bicycle".into(),
            k: 10,
            kinds: None,
            tags: None,
        })
        .await
        .unwrap();
    assert!(left.is_empty());
    let mut erased = receipt.session_ids.clone();
    erased.sort();
    assert_eq!(erased, ["alice-1", "alice-3"]);
    assert_eq!(fixture.in_files("canary-user-0e4d8a6b"), 0);
    assert!(
        fixture
            .recalled("alice", "passport number")
            .await
            .is_empty()
    );
    assert_eq!(
        fixture.recalled("bob", "locker").await,
        ["Bob keeps his bike in locker 12."],
        "what was not erased stays (stored sealed, so in no file in plain)"
    );

    // Receipts name what was erased, never the content.
    let receipts = fixture.coordinator.receipts(TENANT, 10).await.unwrap();
    assert_eq!(receipts.len(), 3);
    let stored = serde_json::to_string(&receipts).unwrap();
    assert!(!stored.contains("canary"), "{stored}");
    fixture.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn episode_canaries_leave_every_file_byte_with_their_episode_session_or_user() {
    let fixture = Fixture::open(tempfile::tempdir().unwrap(), embedder());
    fixture
        .say(
            "alice-ep",
            "alice",
            &lines(&[(Role::User, "Refund my order, please.")]),
        )
        .await;
    let record = |user: &str, lesson: &str, source: Option<&str>| {
        let episode = Episode {
            id: 0,
            tenant: TENANT.into(),
            user_id: user.into(),
            agent_id: None,
            task_type: "refund".into(),
            description: format!("tried a refund ({lesson})"),
            outcome: Outcome::Failure,
            reflection: format!("it failed because of {lesson}"),
            lesson: lesson.into(),
            standing: false,
            source_session: source.map(str::to_owned),
            created_at: Timestamp::now(),
        };
        let store = fixture.store.clone();
        async move { store.memories().put_episode(episode).await.unwrap() }
    };
    let one = record("alice", "canary-ep-one-41c2 ask twice", None).await;
    record(
        "alice",
        "canary-ep-session-9d07 check ids",
        Some("alice-ep"),
    )
    .await;
    record("alice", "canary-ep-user-c5e1 be patient", None).await;
    record("bob", "bob-lesson-stays keep receipts", None).await;
    for canary in [
        "canary-ep-one-41c2",
        "canary-ep-session-9d07",
        "canary-ep-user-c5e1",
    ] {
        assert!(fixture.in_files(canary) > 0, "{canary} was not written");
    }

    let receipt = fixture.erase(Target::Episode { episode_id: one }).await;
    assert_eq!(receipt.counts.episodes, 1);
    assert_eq!(fixture.in_files("canary-ep-one-41c2"), 0);

    let receipt = fixture
        .erase(Target::Session {
            session_id: "alice-ep".into(),
        })
        .await;
    assert_eq!(
        receipt.counts.episodes, 1,
        "the episode drawn from the session goes with it"
    );
    assert_eq!(fixture.in_files("canary-ep-session-9d07"), 0);
    assert!(fixture.in_files("canary-ep-user-c5e1") > 0);

    let receipt = fixture
        .erase(Target::User {
            user_id: "alice".into(),
        })
        .await;
    assert_eq!(receipt.counts.episodes, 1);
    assert_eq!(fixture.in_files("canary-ep-user-c5e1"), 0);
    assert!(
        fixture
            .store
            .memories()
            .user_episodes(TENANT, "alice")
            .unwrap()
            .is_empty()
    );
    assert!(
        fixture.in_files("bob-lesson-stays") > 0,
        "Bob's episode stays"
    );
    let receipts =
        serde_json::to_string(&fixture.coordinator.receipts(TENANT, 10).await.unwrap()).unwrap();
    assert!(!receipts.contains("canary"), "{receipts}");
    fixture.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_erasure_finishes_when_resumed_and_twice_is_harmless() {
    let embedder = embedder();
    let fixture = Fixture::open(tempfile::tempdir().unwrap(), embedder.clone());
    fixture
        .say(
            "doomed",
            "carol",
            &lines(&[(Role::User, "canary-resume-77aa secret plans")]),
        )
        .await;
    fixture.settle().await;
    // The process died right after recording the job: nothing of it ran.
    let document = serde_json::json!({
        "request": {
            "tenant": TENANT,
            "target": { "kind": "session", "session_id": "doomed" },
            "requested_by": "test",
        },
        "requested_at": Timestamp::now().as_micros(),
    });
    let dir = fixture.close().await;
    {
        let store = Store::open(dir.path().join("memlayer.redb")).unwrap();
        let eraser = store.take_eraser().unwrap();
        eraser.record_job(document).await.unwrap();
        store.shutdown();
    }

    let fixture = Fixture::open(dir, embedder);
    assert!(fixture.in_files("canary-resume-77aa") > 0);
    let finished = fixture.coordinator.resume().await.unwrap();
    assert_eq!(finished.len(), 1);
    assert!(finished[0].resumed);
    assert_eq!(finished[0].session_ids, ["doomed"]);
    assert_eq!(fixture.coordinator.pending().unwrap(), 0);
    assert_eq!(fixture.in_files("canary-resume-77aa"), 0);
    assert!(fixture.coordinator.resume().await.unwrap().is_empty());
    // Erasing what is already gone is harmless and says it removed nothing.
    let again = fixture
        .erase(Target::Session {
            session_id: "doomed".into(),
        })
        .await;
    assert_eq!(again.counts.sessions, 0);
    fixture.close().await;
}

/// An erasure does not wait for the embedding pipeline to work through its backlog: a batch
/// the pipeline read before the deletion adds only what the store still has (the recall
/// tests pin that). Here the pipeline never runs and a recall would wait an hour for it;
/// before, the erasure waited the same, and past the bound went ahead regardless.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erasure_does_not_wait_for_the_embedding_backlog() {
    let fixture = Fixture::without_pipeline(tempfile::tempdir().unwrap(), embedder());
    fixture
        .say(
            "backlogged",
            "erin",
            &lines(&[
                (Role::User, "canary-backlog-5e1f my new door code"),
                (Role::Assistant, "noted"),
            ]),
        )
        .await;
    let receipt = tokio::time::timeout(
        Duration::from_secs(120),
        fixture.erase(Target::Session {
            session_id: "backlogged".into(),
        }),
    )
    .await
    .expect("the erasure waited for the embedding backlog");
    assert_eq!(receipt.session_ids, ["backlogged"]);
    assert_eq!(receipt.counts.sessions, 1);
    assert_eq!(receipt.counts.messages, 2);
    assert_eq!(fixture.in_files("canary-backlog-5e1f"), 0);
    fixture.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_erases_only_conversations_older_than_the_rule() {
    let fixture = Fixture::open(tempfile::tempdir().unwrap(), embedder());
    fixture
        .say(
            "recent",
            "dave",
            &lines(&[(Role::User, "A recent question.")]),
        )
        .await;
    fixture
        .store
        .tenants()
        .set_retention(TENANT, Some(30))
        .await
        .unwrap();
    let day = 24 * 60 * 60 * 1_000_000u64;
    // A day later nothing is 30 days old; the rule ran and is not due again until tomorrow.
    let tomorrow = Timestamp::from_micros(Timestamp::now().as_micros() + day);
    let receipts = fixture
        .coordinator
        .apply_due_retention(tomorrow)
        .await
        .unwrap();
    assert_eq!(receipts.len(), 1);
    assert_eq!(receipts[0].counts.sessions, 0);
    assert!(
        fixture
            .coordinator
            .apply_due_retention(tomorrow)
            .await
            .unwrap()
            .is_empty()
    );
    // Forty days later (a run missed while down is due at once), the session goes.
    let later = Timestamp::from_micros(Timestamp::now().as_micros() + 40 * day);
    let receipts = fixture
        .coordinator
        .apply_due_retention(later)
        .await
        .unwrap();
    assert_eq!(receipts[0].session_ids, ["recent"]);
    assert_eq!(receipts[0].requested_by, "retention");
    assert!(
        !fixture
            .store
            .sessions()
            .session_exists(&Access::tenant_wide(TENANT), "recent")
            .unwrap()
    );
    fixture.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_of_more_sessions_than_are_erased_at_once_erases_all_in_order() {
    let fixture = Fixture::open(tempfile::tempdir().unwrap(), embedder());
    // More than two batches of `SESSIONS_AT_ONCE`, appended oldest first.
    let ids: Vec<String> = (0..150).map(|i| format!("old-{i:03}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let text = format!("Conversation {i} about parcel {i} and its delivery.");
        fixture
            .say(
                id,
                &format!("user-{}", i % 7),
                &lines(&[(Role::User, &text)]),
            )
            .await;
    }
    fixture.settle().await;
    assert_eq!(fixture.recall.indexed_vectors(), 150);
    let receipt = fixture
        .coordinator
        .purge(TENANT, 0, "test", Timestamp::now())
        .await
        .unwrap();
    assert_eq!(receipt.session_ids, ids);
    assert_eq!(
        (receipt.counts.sessions, receipt.counts.messages),
        (150, 150)
    );
    for id in &ids {
        assert!(
            !fixture
                .store
                .sessions()
                .session_exists(&Access::tenant_wide(TENANT), id)
                .unwrap()
        );
    }
    // Out of the index too, not only unreachable through the store.
    assert_eq!(fixture.recall.indexed_vectors(), 0);
    assert!(
        fixture
            .recalled("user-3", "parcel delivery")
            .await
            .is_empty()
    );
    fixture.close().await;
}

/// One random erasure of the property test.
#[derive(Debug, Clone)]
enum Op {
    Message { session: usize, index: u64 },
    Session { session: usize },
    User { user: usize },
}

const SESSIONS: usize = 4;
const USERS: usize = 2;

fn owner(session: usize) -> String {
    format!("user-{}", session % USERS)
}

fn arb_case() -> impl proptest::strategy::Strategy<Value = (Vec<usize>, Vec<Op>)> {
    let lengths = proptest::collection::vec(1usize..5, SESSIONS);
    let op = prop_oneof![
        4 => (0..SESSIONS, 0u64..5).prop_map(|(session, index)| Op::Message { session, index }),
        1 => (0..SESSIONS).prop_map(|session| Op::Session { session }),
        1 => (0..USERS).prop_map(|user| Op::User { user }),
    ];
    (lengths, proptest::collection::vec(op, 1..5))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    /// After random erasures, every message the model says remains is stored exactly as it
    /// was, no erased message is stored, found by recall or present in the files.
    #[test]
    fn random_erasures_leave_exactly_what_was_not_erased((lengths, ops) in arb_case()) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(check_random_erasures(lengths, ops));
    }
}

async fn check_random_erasures(lengths: Vec<usize>, ops: Vec<Op>) {
    let fixture = Fixture::open(tempfile::tempdir().unwrap(), embedder());
    // The model: (session, index) → content, for what must remain.
    let mut model: BTreeMap<(usize, u64), String> = BTreeMap::new();
    for (session, &length) in lengths.iter().enumerate() {
        let contents: Vec<(Role, String)> = (0..length)
            .map(|i| {
                (
                    Role::User,
                    format!("note-{session}-{i} about topic {}", i * 7 + session),
                )
            })
            .collect();
        for (i, (_, content)) in contents.iter().enumerate() {
            model.insert((session, i as u64), content.clone());
        }
        fixture
            .say(&format!("s{session}"), &owner(session), &contents)
            .await;
    }
    fixture.settle().await;
    let mut erased: Vec<String> = Vec::new();
    for op in &ops {
        let (target, removed): (Target, Vec<(usize, u64)>) = match *op {
            Op::Message { session, index } => (
                Target::Message {
                    session_id: format!("s{session}"),
                    index,
                },
                vec![(session, index)],
            ),
            Op::Session { session } => (
                Target::Session {
                    session_id: format!("s{session}"),
                },
                model
                    .keys()
                    .filter(|(s, _)| *s == session)
                    .copied()
                    .collect(),
            ),
            Op::User { user } => (
                Target::User {
                    user_id: format!("user-{user}"),
                },
                model
                    .keys()
                    .filter(|(s, _)| s % USERS == user)
                    .copied()
                    .collect(),
            ),
        };
        fixture.erase(target).await;
        for key in removed {
            if let Some(content) = model.remove(&key) {
                erased.push(content);
            }
        }
    }
    for session in 0..SESSIONS {
        let id = format!("s{session}");
        let stored: BTreeMap<(usize, u64), String> = if fixture
            .store
            .sessions()
            .session_exists(&Access::tenant_wide(TENANT), &id)
            .unwrap()
        {
            fixture
                .store
                .sessions()
                .messages(&Access::tenant_wide(TENANT), &id, 0, 100)
                .unwrap()
                .into_iter()
                .map(|m| ((session, m.index), m.content))
                .collect()
        } else {
            BTreeMap::new()
        };
        let expected: BTreeMap<(usize, u64), String> = model
            .iter()
            .filter(|((s, _), _)| *s == session)
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        assert_eq!(stored, expected, "session {id} after {ops:?}");
    }
    for content in &erased {
        assert_eq!(fixture.in_files(content), 0, "{content:?} survived {ops:?}");
        for user in 0..USERS {
            let found = fixture.recalled(&format!("user-{user}"), content).await;
            assert!(
                !found.contains(content),
                "{content:?} recalled after {ops:?}"
            );
        }
    }
    for content in model.values() {
        let user = content
            .strip_prefix("note-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|s| s.parse::<usize>().ok())
            .map(owner)
            .unwrap();
        let found = fixture.recalled(&user, content).await;
        assert!(found.contains(content), "{content:?} lost after {ops:?}");
    }
    fixture.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_purge_finishes_after_its_caller_stops_waiting() {
    let fixture = Fixture::open(tempfile::tempdir().unwrap(), embedder());
    for session in ["old-1", "old-2"] {
        let said = format!("canary-started-5150 from {session}");
        fixture
            .say(session, "erin", &lines(&[(Role::User, said.as_str())]))
            .await;
    }
    let running = fixture
        .coordinator
        .start_purge(TENANT, 0, "test", Timestamp::now())
        .await
        .unwrap();
    let id = running.id();
    // The caller gives up at once, as an HTTP request past its deadline does.
    drop(running);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let tenant_wide = Access::tenant_wide(TENANT);
    let receipt = loop {
        match fixture.coordinator.status(&tenant_wide, id).await.unwrap() {
            Some(Status::Done(receipt)) => break receipt,
            Some(Status::Running) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            other => panic!("erasure {id}: {other:?}"),
        }
    };
    assert_eq!(receipt.counts.sessions, 2);
    assert_eq!(fixture.in_files("canary-started-5150"), 0);
    // Another tenant's erasure, and one that never was, are unknown alike.
    let other_tenant = Access::tenant_wide("other");
    assert_eq!(
        fixture.coordinator.status(&other_tenant, id).await.unwrap(),
        None
    );
    assert_eq!(
        fixture
            .coordinator
            .status(&tenant_wide, id + 1)
            .await
            .unwrap(),
        None
    );
    // A tenant-wide erasure is not any one user's to read.
    let user = Access::one_user(TENANT, "ann");
    assert_eq!(fixture.coordinator.status(&user, id).await.unwrap(), None);
    fixture.close().await;
}

/// A user-scoped key's erasure is readable by that user's key and the tenant's, by no other
/// user's: its receipt names the sessions it removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_erasure_is_that_users_and_the_tenants_to_read() {
    let fixture = Fixture::without_pipeline(tempfile::tempdir().unwrap(), embedder());
    fixture
        .say("anns-notes", "ann", &lines(&[(Role::User, "my own notes")]))
        .await;
    let receipt = fixture
        .coordinator
        .erase(ErasureRequest {
            tenant: TENANT.into(),
            target: Target::Session {
                session_id: "anns-notes".into(),
            },
            requested_by: "test".into(),
            user_id: Some("ann".into()),
        })
        .await
        .unwrap();
    assert_eq!(receipt.counts.sessions, 1);
    assert_eq!(receipt.user_id.as_deref(), Some("ann"));
    let status = |access: Access| {
        let coordinator = fixture.coordinator.clone();
        async move { coordinator.status(&access, receipt.id).await.unwrap() }
    };
    let done = Some(Status::Done(Box::new(receipt.clone())));
    assert_eq!(status(Access::one_user(TENANT, "ann")).await, done);
    assert_eq!(status(Access::tenant_wide(TENANT)).await, done);
    assert_eq!(status(Access::one_user(TENANT, "bob")).await, None);
    assert_eq!(status(Access::one_user("other", "ann")).await, None);
    fixture.close().await;
}

/// An erasure whose caller stops waiting goes on to its receipt: here a read held open keeps
/// its compaction waiting while the caller gives up (before, dropping `erase` dropped the job
/// part-way, and the maintenance pass finished it as a resumed job counting nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erasure_whose_caller_stops_waiting_finishes() {
    let fixture = Fixture::without_pipeline(tempfile::tempdir().unwrap(), embedder());
    fixture
        .say(
            "dropped",
            "ann",
            &lines(&[(Role::User, "canary-dropped-9c1")]),
        )
        .await;
    fixture
        .say("kept", "bob", &lines(&[(Role::User, "kept text")]))
        .await;
    let held = fixture
        .store
        .sessions()
        .snapshot(&Access::tenant_wide(TENANT), "kept")
        .unwrap()
        .expect("bob's session");
    let erasing = fixture.coordinator.erase(ErasureRequest {
        tenant: TENANT.into(),
        target: Target::Session {
            session_id: "dropped".into(),
        },
        requested_by: "test".into(),
        user_id: None,
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(300), erasing)
            .await
            .is_err(),
        "the held read keeps the compaction waiting"
    );
    drop(held);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let receipt = loop {
        let receipts = fixture.coordinator.receipts(TENANT, 10).await.unwrap();
        if let Some(receipt) = receipts.into_iter().next() {
            break receipt;
        }
        assert!(std::time::Instant::now() < deadline, "no receipt");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(receipt.counts.sessions, 1);
    assert_eq!(receipt.counts.messages, 1);
    assert!(!receipt.resumed);
    assert_eq!(fixture.in_files("canary-dropped-9c1"), 0);
    fixture.close().await;
}
