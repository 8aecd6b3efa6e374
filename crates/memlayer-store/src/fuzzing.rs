//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`; no memlayer binary enables
//! it). They reach the private record decoders without making the on-disk format public API.
//!
//! It also holds the model of store operations (`Op`, `Model`, `execute`): a plain in-memory
//! account of what the store must hold and answer, which the `store_ops` fuzz target checks
//! after every operation and the fault-injection tests (`faults.rs`) check after every crash.

use std::collections::BTreeMap;

use crate::episodes::EpisodeRecord;
use crate::keys::KeyRecord;
use crate::memories::MemoryRecord;
use crate::record::{
    IdempotencyRecord, MessageRecord, ModelRecord, OutboxRecord, Record, RunRecord, SessionRecord,
    SummaryRecord, VectorRecord,
};
use crate::sealing::{
    SealedMessageRecord, SealedRunRecord, SealedSummaryRecord, SealedVectorRecord, outline,
};
use crate::session_memory::SessionMemoryRecord;
use crate::{
    Access, Append, Memory, MemoryKind, Metadata, NewMessage, NewRun, NewSession, ReplacedText,
    Result, Role, RunStatus, SessionFilter, Store, StoreError, Timestamp,
};

/// Decodes `bytes` as every stored record type. A decoder may refuse the bytes (corruption,
/// a newer version) but must not panic; whatever it accepts must encode and decode back to
/// the same bytes, or a rewrite of the record would change what it says.
pub fn decode_records(bytes: &[u8]) {
    check::<SessionRecord>(bytes);
    check::<MessageRecord>(bytes);
    check::<RunRecord>(bytes);
    check::<IdempotencyRecord>(bytes);
    check::<OutboxRecord>(bytes);
    check::<VectorRecord>(bytes);
    check::<ModelRecord>(bytes);
    check::<SummaryRecord>(bytes);
    check::<KeyRecord>(bytes);
    check::<MemoryRecord>(bytes);
    check::<SessionMemoryRecord>(bytes);
    check::<EpisodeRecord>(bytes);
    check::<SealedMessageRecord>(bytes);
    check::<SealedVectorRecord>(bytes);
    check::<SealedRunRecord>(bytes);
    check::<SealedSummaryRecord>(bytes);
    // The outline of a message, sealed or plain, read without decoding it whole.
    let _ = outline(bytes);
}

/// Reads `bytes` as a key file: refused, or every slot a key, free or torn (never a panic),
/// and the free ones never more than the slots.
pub fn scan_key_file(bytes: &[u8]) {
    if let Ok(scan) = crate::data_keys::scan(bytes) {
        assert!(scan.free.len() as u64 <= scan.count);
        assert!(scan.torn.iter().all(|slot| scan.free.contains(slot)));
    }
}

fn check<R: Record>(bytes: &[u8]) {
    let Ok(record) = R::decode(bytes) else {
        return;
    };
    // Bytes, not values, are compared: f32 components may be NaN, which is never equal to
    // itself.
    let encoded = record.encode();
    let again: Result<R> = R::decode(&encoded);
    let again = again.unwrap_or_else(|err| panic!("{} re-decodes as {err}", R::NAME));
    assert_eq!(again.encode(), encoded, "{} does not round-trip", R::NAME);
}

/// The tenant every modelled operation runs in.
pub const TENANT: &str = "fuzz";
/// The sessions operations pick from (by index, modulo the length).
pub const SESSIONS: [&str; 3] = ["s0", "s1", "s2"];
/// The users memories are remembered for; sessions belong to the first.
pub const USERS: [&str; 2] = ["u0", "u1"];
/// How many memory keys (`k0`…) the model checks; operations use these only.
pub const KEYS: u8 = 3;

/// One store operation over the fixed sessions and users above, as the `store_ops` fuzz target
/// decodes it and the fault-injection tests script it.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fuzzing", derive(arbitrary::Arbitrary))]
pub enum Op {
    /// Appends messages: role (mod 4) and content of each.
    Append {
        /// Which session.
        session: u8,
        /// Role byte and content of each message.
        messages: Vec<(u8, String)>,
        /// Whether the append may create the session.
        create: bool,
        /// An idempotency key (`k<n>`), for retries.
        key: Option<u8>,
    },
    /// Starts later context loads after the session's last message.
    Clear {
        /// Which session.
        session: u8,
    },
    /// Deletes the session with everything it owns.
    Delete {
        /// Which session.
        session: u8,
    },
    /// Erases one message of the session.
    Erase {
        /// Which session.
        session: u8,
        /// The message's index.
        index: u8,
    },
    /// Records run `r<n>` in the session.
    Run {
        /// Which session.
        session: u8,
        /// The run id's number.
        run: u8,
    },
    /// Remembers a long-term memory for a user; with a key (`k<n>`), puts it under the key:
    /// the memory stored under it is updated, or a new one made.
    Remember {
        /// Which user.
        user: u8,
        /// What is remembered.
        text: String,
        /// The key's number.
        key: Option<u8>,
    },
    /// Deletes one of a user's memories. Ids are random, so the operation names the memory
    /// by its place in the user's list (oldest first); past the end, it names an id no memory
    /// has.
    Forget {
        /// Which user.
        user: u8,
        /// The memory's place in the user's list.
        memory: u8,
    },
    /// Compacts the file, as every erasure does last.
    Compact,
}

/// What an operation answered, with the store's own types reduced to what the model predicts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// An append stored (or replayed) messages from `first_index` on.
    Appended {
        /// Index of the first message.
        first_index: u64,
        /// Whether the append created the session.
        created: bool,
        /// Whether it was answered from the idempotency record.
        replayed: bool,
    },
    /// A clear moved the load checkpoint here.
    Cleared(u64),
    /// The session was deleted.
    Deleted,
    /// An erasure ran; whether the message was still stored.
    Erased(bool),
    /// The run was recorded.
    Recorded,
    /// The memory was stored.
    Remembered,
    /// A memory deletion ran; whether the memory existed.
    Forgot(bool),
    /// Compaction ran.
    Compacted,
    /// Refused as invalid input.
    Invalid,
    /// Refused: no such session.
    NotFound,
    /// Refused: contradicts what is stored.
    Conflict,
}

/// Runs `op` on the store. Caller mistakes become outcomes; storage failures stay errors.
pub async fn execute(store: &Store, op: &Op) -> Result<Outcome> {
    let outcome = match op {
        Op::Append {
            session,
            messages,
            create,
            key,
        } => {
            let append = Append {
                messages: messages
                    .iter()
                    .map(|(role_byte, content)| {
                        NewMessage::new(role(*role_byte), content.clone(), 1)
                    })
                    .collect(),
                create: create.then(|| NewSession {
                    user_id: USERS[0].into(),
                    agent_id: "a".into(),
                    flow_id: None,
                    metadata: Metadata::new(),
                }),
                idempotency_key: key.map(|key| format!("k{key}")),
            };
            store
                .sessions()
                .append(&Access::tenant_wide(TENANT), session_id(*session), append)
                .await
                .map(|appended| Outcome::Appended {
                    first_index: appended.first_index,
                    created: appended.created_session,
                    replayed: appended.replayed,
                })
        }
        Op::Clear { session } => store
            .sessions()
            .clear_session(&Access::tenant_wide(TENANT), session_id(*session))
            .await
            .map(Outcome::Cleared),
        Op::Delete { session } => store
            .eraser()
            .delete_session(&Access::tenant_wide(TENANT), session_id(*session))
            .await
            .map(|_| Outcome::Deleted),
        Op::Erase { session, index } => store
            .eraser()
            .erase_message(
                &Access::tenant_wide(TENANT),
                session_id(*session),
                u64::from(*index),
            )
            .await
            .map(|erased| Outcome::Erased(erased.message)),
        Op::Run { session, run } => {
            let run = NewRun {
                run_id: Some(format!("r{run}")),
                status: RunStatus::Completed,
                content: Some("done".into()),
                tool_calls: Vec::new(),
                error: None,
                metadata: Metadata::new(),
            };
            store
                .sessions()
                .record_run(&Access::tenant_wide(TENANT), session_id(*session), run)
                .await
                .map(|_| Outcome::Recorded)
        }
        Op::Remember { user, text, key } => {
            let now = Timestamp::now();
            let key = key.map(|key| format!("k{key}"));
            let stored = match &key {
                Some(key) => store
                    .memories()
                    .memory_by_key(TENANT, user_id(*user), None, key)?,
                None => None,
            };
            let memory = stored.map_or_else(
                || Memory {
                    id: 0,
                    revision: 0,
                    tenant: TENANT.into(),
                    user_id: user_id(*user).into(),
                    agent_id: None,
                    text: text.clone(),
                    kind: MemoryKind::Fact,
                    tags: Vec::new(),
                    source: None,
                    created_at: now,
                    updated_at: now,
                    history: Vec::new(),
                    vector: vec![0.5; 4],
                    key: key.clone(),
                },
                // As `LongTermMemory` puts it: the replaced text stays in the history.
                |mut stored| {
                    let old = std::mem::replace(&mut stored.text, text.clone());
                    stored.history.push(ReplacedText {
                        text: old,
                        replaced_at: now,
                        source: None,
                    });
                    stored.updated_at = now;
                    stored
                },
            );
            store
                .memories()
                .put_memory(memory, &Access::tenant_wide(TENANT))
                .await
                .map(|_| Outcome::Remembered)
        }
        Op::Forget { user, memory } => {
            // 0 is never an id.
            let id = store
                .memories()
                .user_memories(TENANT, user_id(*user))?
                .get(usize::from(*memory))
                .map_or(0, |memory| memory.id);
            store
                .eraser()
                .delete_memory(TENANT, id)
                .await
                .map(Outcome::Forgot)
        }
        Op::Compact => store.eraser().compact().map(|_| Outcome::Compacted),
    };
    match outcome {
        Err(StoreError::InvalidInput { .. } | StoreError::InvalidId { .. }) => Ok(Outcome::Invalid),
        Err(StoreError::SessionNotFound { .. }) => Ok(Outcome::NotFound),
        Err(StoreError::Conflict(_)) => Ok(Outcome::Conflict),
        other => other,
    }
}

fn role(byte: u8) -> Role {
    [Role::System, Role::User, Role::Assistant, Role::Tool][usize::from(byte % 4)]
}

fn session_id(session: u8) -> &'static str {
    SESSIONS[usize::from(session) % SESSIONS.len()]
}

fn user_id(user: u8) -> &'static str {
    USERS[usize::from(user) % USERS.len()]
}

/// The messages of an append request, as the model compares them.
type Request = Vec<(Role, String)>;

/// What the store must hold for one session.
#[derive(Debug, Clone, Default, PartialEq)]
struct SessionModel {
    /// Each message, `None` once erased.
    messages: Vec<Option<(Role, String)>>,
    load_from: u64,
    /// Run ids in recording order.
    runs: Vec<String>,
    /// Idempotency keys: the request's messages (`None` once one of them was erased: any
    /// body then replays) and the first answer.
    keys: BTreeMap<String, (Option<Request>, Outcome)>,
}

/// A plain in-memory model of what the store must hold after a sequence of operations, and
/// what each operation must answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Model {
    sessions: [Option<SessionModel>; SESSIONS.len()],
    /// Every memory, oldest first.
    memories: Vec<MemoryModel>,
}

/// What the store must hold for one memory.
#[derive(Debug, Clone, PartialEq)]
struct MemoryModel {
    user: &'static str,
    key: Option<String>,
    text: String,
    /// The texts a put under its key replaced, oldest first (more than the store keeps: a
    /// text this lists is never checked to be gone).
    replaced: Vec<String>,
}

impl Model {
    /// Applies `op` to the model and returns what the store must answer.
    pub fn apply(&mut self, op: &Op) -> Outcome {
        match op {
            Op::Append {
                session,
                messages,
                create,
                key,
            } => {
                let messages: Vec<(Role, String)> = messages
                    .iter()
                    .map(|(role_byte, content)| (role(*role_byte), content.clone()))
                    .collect();
                if messages.is_empty()
                    || messages.len() > crate::MAX_MESSAGES_PER_APPEND
                    || messages.iter().any(|(_, content)| content.contains('\0'))
                {
                    return Outcome::Invalid;
                }
                let key = key.map(|key| format!("k{key}"));
                let slot = &mut self.sessions[usize::from(*session) % SESSIONS.len()];
                if let (Some(state), Some(key)) = (slot.as_ref(), &key)
                    && let Some((request, first)) = state.keys.get(key)
                {
                    let same = request.as_ref().is_none_or(|request| request == &messages);
                    return match (same, first.clone()) {
                        (
                            true,
                            Outcome::Appended {
                                first_index,
                                created,
                                ..
                            },
                        ) => Outcome::Appended {
                            first_index,
                            created,
                            replayed: true,
                        },
                        _ => Outcome::Conflict,
                    };
                }
                let created = slot.is_none();
                if created && !create {
                    return Outcome::NotFound;
                }
                let state = slot.get_or_insert_with(SessionModel::default);
                let outcome = Outcome::Appended {
                    first_index: state.messages.len() as u64,
                    created,
                    replayed: false,
                };
                if let Some(key) = key {
                    state
                        .keys
                        .insert(key, (Some(messages.clone()), outcome.clone()));
                }
                state.messages.extend(messages.into_iter().map(Some));
                outcome
            }
            Op::Clear { session } => match self.session_mut(*session) {
                Some(state) => {
                    state.load_from = state.messages.len() as u64;
                    Outcome::Cleared(state.load_from)
                }
                None => Outcome::NotFound,
            },
            Op::Delete { session } => {
                match self.sessions[usize::from(*session) % SESSIONS.len()].take() {
                    Some(_) => Outcome::Deleted,
                    None => Outcome::NotFound,
                }
            }
            Op::Erase { session, index } => match self.session_mut(*session) {
                Some(state) => {
                    let index = usize::from(*index);
                    let erased = state
                        .messages
                        .get_mut(index)
                        .and_then(Option::take)
                        .is_some();
                    if erased {
                        for (request, first) in state.keys.values_mut() {
                            if let (Some(messages), Outcome::Appended { first_index, .. }) =
                                (request.as_ref(), first)
                            {
                                let first_index = *first_index as usize;
                                if (first_index..first_index + messages.len()).contains(&index) {
                                    *request = None;
                                }
                            }
                        }
                    }
                    Outcome::Erased(erased)
                }
                None => Outcome::NotFound,
            },
            Op::Run { session, run } => match self.session_mut(*session) {
                Some(state) => {
                    let run_id = format!("r{run}");
                    if state.runs.contains(&run_id) {
                        Outcome::Conflict
                    } else {
                        state.runs.push(run_id);
                        Outcome::Recorded
                    }
                }
                None => Outcome::NotFound,
            },
            Op::Remember { user, text, key } => {
                if text.contains('\0') {
                    return Outcome::Invalid;
                }
                let (user, key) = (user_id(*user), key.map(|key| format!("k{key}")));
                let under_key = key.is_some().then(|| {
                    self.memories
                        .iter_mut()
                        .find(|memory| memory.user == user && memory.key == key)
                });
                match under_key.flatten() {
                    Some(memory) => {
                        let old = std::mem::replace(&mut memory.text, text.clone());
                        memory.replaced.push(old);
                    }
                    None => self.memories.push(MemoryModel {
                        user,
                        key,
                        text: text.clone(),
                        replaced: Vec::new(),
                    }),
                }
                Outcome::Remembered
            }
            Op::Forget { user, memory } => {
                let user = user_id(*user);
                let place = self
                    .memories
                    .iter()
                    .enumerate()
                    .filter(|(_, memory)| memory.user == user)
                    .nth(usize::from(*memory))
                    .map(|(place, _)| place);
                Outcome::Forgot(place.map(|place| self.memories.remove(place)).is_some())
            }
            Op::Compact => Outcome::Compacted,
        }
    }

    /// Every message content and memory text the store holds: a text that leaves this set
    /// was erased, and must leave the file with the next compaction.
    pub fn texts(&self) -> std::collections::BTreeSet<String> {
        let messages = self.sessions.iter().flatten().flat_map(|session| {
            session
                .messages
                .iter()
                .flatten()
                .map(|(_, content)| content.clone())
        });
        let memories = self
            .memories
            .iter()
            .flat_map(|memory| memory.replaced.iter().chain([&memory.text]).cloned());
        messages.chain(memories).collect()
    }

    fn session_mut(&mut self, session: u8) -> Option<&mut SessionModel> {
        self.sessions[usize::from(session) % SESSIONS.len()].as_mut()
    }

    /// Whether the store holds exactly what the model says, read back through the public read
    /// paths, and its memory tables agree with their records; the error names the first
    /// difference.
    pub fn check(&self, store: &Store) -> std::result::Result<(), String> {
        for (id, expected) in SESSIONS.iter().zip(&self.sessions) {
            let session = store
                .sessions()
                .session(&Access::tenant_wide(TENANT), id)
                .map_err(|err| err.to_string())?;
            let (session, expected) = match (session, expected) {
                (None, None) => continue,
                (Some(session), Some(expected)) => (session, expected),
                (session, expected) => {
                    return Err(format!("{id}: stored {session:?}, expected {expected:?}"));
                }
            };
            let stored = (session.message_count, session.load_from);
            let wanted = (expected.messages.len() as u64, expected.load_from);
            if stored != wanted {
                return Err(format!(
                    "{id}: (count, load_from) {stored:?}, expected {wanted:?}"
                ));
            }
            let stored: Vec<(u64, Role, String)> = store
                .sessions()
                .messages(&Access::tenant_wide(TENANT), id, 0, usize::MAX)
                .map_err(|err| err.to_string())?
                .into_iter()
                .map(|message| (message.index, message.role, message.content))
                .collect();
            let wanted: Vec<(u64, Role, String)> = expected
                .messages
                .iter()
                .enumerate()
                .filter_map(|(index, message)| {
                    let (role, content) = message.clone()?;
                    Some((index as u64, role, content))
                })
                .collect();
            if stored != wanted {
                return Err(format!("messages of {id}: {stored:?}, expected {wanted:?}"));
            }
            let runs: Vec<String> = store
                .sessions()
                .runs(&Access::tenant_wide(TENANT), id, 0, usize::MAX)
                .map_err(|err| err.to_string())?
                .into_iter()
                .map(|run| run.run_id)
                .collect();
            if runs != expected.runs {
                return Err(format!(
                    "runs of {id}: {runs:?}, expected {:?}",
                    expected.runs
                ));
            }
        }
        let listed = store
            .sessions()
            .list_sessions(
                &Access::tenant_wide(TENANT),
                &SessionFilter::default(),
                0,
                crate::MAX_PAGE_SIZE,
            )
            .map_err(|err| err.to_string())?;
        let live = self.sessions.iter().flatten().count() as u64;
        if (listed.total, listed.items.len() as u64) != (live, live) {
            return Err(format!(
                "{} sessions listed ({} on the page), expected {live}",
                listed.total,
                listed.items.len()
            ));
        }
        let mut ids = std::collections::BTreeSet::new();
        for user in USERS {
            let stored = store
                .memories()
                .user_memories(TENANT, user)
                .map_err(|err| err.to_string())?;
            for memory in &stored {
                if !(1..1 << 53).contains(&memory.id) || !ids.insert(memory.id) {
                    return Err(format!(
                        "memory id {} is out of range or repeated",
                        memory.id
                    ));
                }
            }
            let stored: Vec<String> = stored.into_iter().map(|memory| memory.text).collect();
            let wanted: Vec<String> = self
                .memories
                .iter()
                .filter(|memory| memory.user == user)
                .map(|memory| memory.text.clone())
                .collect();
            if stored != wanted {
                return Err(format!(
                    "memories of {user}, oldest first: {stored:?}, expected {wanted:?}"
                ));
            }
            for key in (0..KEYS).map(|key| format!("k{key}")) {
                let stored = store
                    .memories()
                    .memory_by_key(TENANT, user, None, &key)
                    .map_err(|err| err.to_string())?
                    .map(|memory| memory.text);
                let wanted = self
                    .memories
                    .iter()
                    .find(|memory| memory.user == user && memory.key.as_deref() == Some(&key))
                    .map(|memory| memory.text.clone());
                if stored != wanted {
                    return Err(format!(
                        "memory of {user} under {key}: {stored:?}, expected {wanted:?}"
                    ));
                }
            }
        }
        let tables = store
            .memories()
            .check_tables()
            .map_err(|err| err.to_string())?;
        if !tables.is_consistent() {
            return Err(format!("memory tables: {:?}", tables.problems));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::collection::vec;
    use proptest::option;
    use proptest::prelude::*;

    use super::{Model, Op, execute};
    use crate::Store;

    /// Texts, now and then with a NUL (refused), often repeated across operations.
    fn text() -> impl Strategy<Value = String> {
        prop_oneof![4 => "[a-c ]{0,4}", 1 => Just("a\0b".to_owned())]
    }

    fn op() -> impl Strategy<Value = Op> {
        let append = (
            any::<u8>(),
            vec((any::<u8>(), text()), 0..4),
            any::<bool>(),
            option::of(0u8..3),
        )
            .prop_map(|(session, messages, create, key)| Op::Append {
                session,
                messages,
                create,
                key,
            });
        prop_oneof![
            6 => append,
            1 => any::<u8>().prop_map(|session| Op::Clear { session }),
            1 => any::<u8>().prop_map(|session| Op::Delete { session }),
            2 => (any::<u8>(), 0u8..6).prop_map(|(session, index)| Op::Erase { session, index }),
            2 => (any::<u8>(), 0u8..3).prop_map(|(session, run)| Op::Run { session, run }),
            2 => (any::<u8>(), text(), option::of(0..super::KEYS))
                .prop_map(|(user, text, key)| Op::Remember { user, text, key }),
            1 => (any::<u8>(), 0u8..3).prop_map(|(user, memory)| Op::Forget { user, memory }),
            1 => Just(Op::Compact),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// The model the fuzz target and the fault-injection tests trust agrees with the store
        /// on random sequences, answer by answer and state by state, in every `cargo test`.
        #[test]
        fn the_model_predicts_the_store(ops in vec(op(), 1..24)) {
            let dir = crate::faults::temp_dir();
            let store = Store::open(dir.path().join("memlayer.redb")).unwrap();
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let mut model = Model::default();
            for op in &ops {
                let answered = rt.block_on(execute(&store, op)).unwrap();
                prop_assert_eq!(answered, model.apply(op), "{:?}", op);
                if let Err(difference) = model.check(&store) {
                    prop_assert!(false, "after {:?}: {}", op, difference);
                }
            }
            store.shutdown();
        }
    }
}
