//! A sequence of store operations over a few sessions, decoded from the input with
//! `arbitrary`, checked after every operation against a plain in-memory model of what the
//! store must hold. Each input runs on a fresh, real redb file (the server's default commit
//! mode) in a temporary directory, under /dev/shm when it exists so that fsync costs nothing.

#![no_main]

use std::sync::LazyLock;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use memlayer_store::{
    Append, Metadata, NewMessage, NewSession, Role, SessionFilter, Store, StoreError,
};

const TENANT: &str = "fuzz";
const SESSIONS: [&str; 3] = ["s0", "s1", "s2"];
/// Long enough for interesting sequences, short enough for hundreds of inputs a second.
const MAX_OPS: usize = 24;
const MAX_BATCH: usize = 6;

#[derive(Arbitrary, Debug)]
enum Op {
    Append {
        session: u8,
        /// Role (mod 4) and content of each message.
        messages: Vec<(u8, String)>,
        create: bool,
    },
    Clear {
        session: u8,
    },
    Delete {
        session: u8,
    },
    Erase {
        session: u8,
        index: u8,
    },
    Compact,
}

/// What the store must hold for one session: each message (`None` once erased) and where
/// context loads start.
#[derive(Debug, Default, Clone)]
struct Model {
    messages: Vec<Option<(Role, String)>>,
    load_from: u64,
}

fn role(byte: u8) -> Role {
    [Role::System, Role::User, Role::Assistant, Role::Tool][usize::from(byte % 4)]
}

fn owner() -> NewSession {
    NewSession {
        user_id: "u".into(),
        agent_id: "a".into(),
        flow_id: None,
        metadata: Metadata::new(),
    }
}

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a tokio runtime")
});

fn temp_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    let builder = tempfile::Builder::new();
    if shm.is_dir() {
        builder.tempdir_in(shm)
    } else {
        builder.tempdir()
    }
    .expect("a temporary directory")
}

fuzz_target!(|ops: Vec<Op>| {
    let dir = temp_dir();
    let store = Store::open(dir.path().join("memlayer.redb")).expect("open a new store");
    let mut model: [Option<Model>; SESSIONS.len()] = Default::default();
    for op in ops.into_iter().take(MAX_OPS) {
        apply(&store, &mut model, op);
        check(&store, &model);
    }
    store.shutdown();
});

/// Runs `op` on the store and on the model, and checks that the store answered what the
/// model predicts.
fn apply(store: &Store, model: &mut [Option<Model>; SESSIONS.len()], op: Op) {
    match op {
        Op::Append {
            session,
            messages,
            create,
        } => {
            let slot = usize::from(session) % SESSIONS.len();
            let messages: Vec<(Role, String)> = messages
                .into_iter()
                .take(MAX_BATCH)
                .map(|(r, content)| (role(r), content))
                .collect();
            let append = Append {
                messages: messages
                    .iter()
                    .map(|(role, content)| NewMessage {
                        role: *role,
                        content: content.clone(),
                        token_count: 1,
                        timestamp: None,
                        metadata: Metadata::new(),
                    })
                    .collect(),
                create: create.then(owner),
                idempotency_key: None,
            };
            let result = RUNTIME.block_on(store.append(TENANT, SESSIONS[slot], append));
            let invalid = messages.is_empty() || messages.iter().any(|(_, c)| c.contains('\0'));
            match (&mut model[slot], result) {
                (_, Err(StoreError::InvalidInput { .. })) if invalid => {}
                (None, Err(StoreError::SessionNotFound { .. })) if !invalid && !create => {}
                (session @ None, Ok(appended)) if !invalid && create => {
                    assert!(appended.created_session);
                    assert_eq!(appended.first_index, 0);
                    *session = Some(Model {
                        messages: messages.into_iter().map(Some).collect(),
                        load_from: 0,
                    });
                }
                (Some(session), Ok(appended)) if !invalid => {
                    assert!(!appended.created_session);
                    assert_eq!(appended.first_index, session.messages.len() as u64);
                    session.messages.extend(messages.into_iter().map(Some));
                }
                (session, result) => {
                    panic!("append to {session:?} (create {create}, invalid {invalid}): {result:?}")
                }
            }
        }
        Op::Clear { session } => {
            let slot = usize::from(session) % SESSIONS.len();
            let result = RUNTIME.block_on(store.clear_session(TENANT, SESSIONS[slot]));
            match (&mut model[slot], result) {
                (None, Err(StoreError::SessionNotFound { .. })) => {}
                (Some(session), Ok(load_from)) => {
                    session.load_from = session.messages.len() as u64;
                    assert_eq!(load_from, session.load_from);
                }
                (session, result) => panic!("clear of {session:?}: {result:?}"),
            }
        }
        Op::Delete { session } => {
            let slot = usize::from(session) % SESSIONS.len();
            let result = RUNTIME.block_on(store.delete_session(TENANT, SESSIONS[slot]));
            match (&model[slot], result) {
                (None, Err(StoreError::SessionNotFound { .. })) | (Some(_), Ok(_)) => {
                    model[slot] = None;
                }
                (session, result) => panic!("delete of {session:?}: {result:?}"),
            }
        }
        Op::Erase { session, index } => {
            let slot = usize::from(session) % SESSIONS.len();
            let result =
                RUNTIME.block_on(store.erase_message(TENANT, SESSIONS[slot], u64::from(index)));
            match (&mut model[slot], result) {
                (None, Err(StoreError::SessionNotFound { .. })) => {}
                (Some(session), Ok(erased)) => {
                    let stored = session
                        .messages
                        .get_mut(usize::from(index))
                        .and_then(Option::take);
                    assert_eq!(erased.message, stored.is_some(), "erase of message {index}");
                }
                (session, result) => panic!("erase of {index} in {session:?}: {result:?}"),
            }
        }
        Op::Compact => {
            store.compact().expect("compaction with no reader open");
        }
    }
}

/// The store holds exactly what the model says, read back through the public read paths.
fn check(store: &Store, model: &[Option<Model>; SESSIONS.len()]) {
    for (id, expected) in SESSIONS.iter().zip(model) {
        let session = store.session(TENANT, id).expect("read a session");
        match (session, expected) {
            (None, None) => {}
            (Some(session), Some(expected)) => {
                assert_eq!(session.message_count, expected.messages.len() as u64);
                assert_eq!(session.load_from, expected.load_from);
                let stored: Vec<(u64, Role, String)> = store
                    .messages(TENANT, id, 0, usize::MAX)
                    .expect("read messages")
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
                assert_eq!(stored, wanted, "messages of {id}");
            }
            (session, expected) => panic!("{id}: stored {session:?}, expected {expected:?}"),
        }
    }
    let listed = store
        .list_sessions(TENANT, &SessionFilter::default(), 0, 100)
        .expect("list sessions");
    let live = model.iter().flatten().count() as u64;
    assert_eq!(listed.total, live, "sessions listed");
    assert_eq!(
        listed.items.len() as u64,
        live,
        "sessions on the first page"
    );
}
