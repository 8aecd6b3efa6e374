//! A sequence of store operations over a few sessions and users, decoded from the input with
//! `arbitrary`, checked after every operation against the store's operations model
//! (`memlayer_store::fuzzing::Model`, which the fault-injection tests share). Each input runs on
//! a fresh, real redb file (the server's default commit mode) in a temporary directory, under
//! /dev/shm when it exists so that fsync costs nothing.

#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use memlayer_store::Store;
use memlayer_store::fuzzing::{Model, Op, execute};

/// Long enough for interesting sequences, short enough for hundreds of inputs a second.
const MAX_OPS: usize = 24;
const MAX_BATCH: usize = 6;

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
    let mut model = Model::default();
    for mut op in ops.into_iter().take(MAX_OPS) {
        if let Op::Append { messages, .. } = &mut op {
            messages.truncate(MAX_BATCH);
        }
        // The store must answer what the model predicts, and then hold what the model holds.
        let answered = RUNTIME
            .block_on(execute(&store, &op))
            .unwrap_or_else(|err| panic!("{op:?} failed: {err}"));
        assert_eq!(answered, model.apply(&op), "{op:?}");
        if let Err(difference) = model.check(&store) {
            panic!("after {op:?}: {difference}");
        }
    }
    store.shutdown();
});
