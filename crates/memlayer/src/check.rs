//! `memlayer check`: whether a data directory can be served as it is, for operators after a
//! crash or before a backup, and for the crash test after every kill. The store must open
//! (its page checksums verified), the vector snapshot, if there is one, must load (its
//! checksum, counts and every graph link checked), and the vector index a start would use
//! (the snapshot's, brought up to the store if it is stale) must hold exactly the stored
//! vectors, each among its own ten nearest neighbours, searched through the graph. Erasures a crash interrupted are
//! listed: they are not damage (the next start finishes them before it serves), but an
//! operator should know; while there are any, vectors of sessions the store no longer has
//! are theirs to remove. The tables listing memories and episodes must agree with the
//! records they list.

use anyhow::Context;
use memlayer_embed::{Embedder, EmbedderOptions};
use memlayer_index::{Recall, RecallOptions, SnapshotLoad};
use memlayer_store::{MessageKey, Store, StoreOptions};

use crate::config::{AssetArgs, DataArgs};
use crate::{SNAPSHOT_FILE, STORE_FILE};

/// Flags of `memlayer check`.
#[derive(clap::Args)]
pub(crate) struct CheckArgs {
    #[command(flatten)]
    data: DataArgs,
    #[command(flatten)]
    assets: AssetArgs,
}

pub(crate) fn run(args: CheckArgs) -> anyhow::Result<()> {
    let dir = args.data.data_dir()?;
    let store_path = dir.join(STORE_FILE);
    anyhow::ensure!(
        store_path.is_file(),
        "no store at {}: nothing to check",
        store_path.display()
    );
    let assets = args.data.assets(args.assets)?;
    assets.check()?;
    // Every page, even of a file unchanged since its clean close: the operator's check
    // verifies what was written, not only that nothing changed since.
    let store = Store::open_with(&store_path, StoreOptions::default().with_check_every_page())
        .with_context(|| format!("cannot open the store {}", store_path.display()))?;
    println!(
        "store {}: opens, page checksums verified",
        store_path.display()
    );
    let pending = store.take_eraser()?.pending_jobs()?;
    if !pending.is_empty() {
        println!(
            "erasures: {} interrupted (the next `memlayer serve` finishes them before serving)",
            pending.len()
        );
    }
    let tables = store.memories().check_tables()?;
    println!(
        "memory tables: {} memories, {} episodes, {} problem(s)",
        tables.memories,
        tables.episodes,
        tables.problems.len()
    );
    for problem in tables.problems.iter().take(SHOWN) {
        println!("memory tables: {problem}");
    }
    anyhow::ensure!(
        tables.is_consistent(),
        "the memory and episode tables disagree with their records ({} problem(s))",
        tables.problems.len()
    );
    let embedder = Embedder::open(&assets, EmbedderOptions::default())
        .context("cannot load the embedding model")?;
    // The check compares vectors only. The snapshot's keyword section is verified as it
    // loads (one that fails a check makes the snapshot unusable); the texts it lacks, past
    // the few thousand analysed at open, wait for the backfill, which needs the pipeline.
    let snapshot_path = dir.join(SNAPSHOT_FILE);
    let options = RecallOptions::default()
        .with_snapshot(snapshot_path.clone())
        .with_keywords_in_background();
    let recall = Recall::open(store.clone(), embedder.clone(), options)
        .context("cannot load the vector index")?;
    let snapshot = recall.snapshot_at_open().clone();
    let check = recall.check_index()?;
    embedder.shutdown();
    store.shutdown();
    println!(
        "vector snapshot {}: {}",
        snapshot_path.display(),
        match &snapshot {
            SnapshotLoad::Absent => "none (a start builds the index from the stored vectors)",
            SnapshotLoad::Current =>
                "loaded as saved (its graph too, if it has one), every check passed",
            SnapshotLoad::Stale =>
                "loaded and brought up to the stored vectors, which changed after it was saved",
            SnapshotLoad::Unusable(_) => "unusable",
        }
    );
    println!(
        "vector index: {} stored, {} indexed, {} missing, {} orphaned, {} unreachable",
        check.stored,
        check.indexed,
        check.missing.len(),
        check.orphaned.len(),
        check.unreachable.len()
    );
    // An interrupted erasure may have deleted its sessions from the store and not yet from
    // the snapshot; the next start finishes it before serving, and takes them out then.
    let awaiting_erasure = !pending.is_empty() && !check.orphaned.is_empty();
    if awaiting_erasure {
        println!(
            "vector index: the {} orphaned vector(s) belong to the interrupted erasures, which \
             remove them at the next start",
            check.orphaned.len()
        );
    }
    anyhow::ensure!(
        check.missing.is_empty()
            && check.unreachable.is_empty()
            && (check.orphaned.is_empty() || awaiting_erasure),
        "the vector index does not match the stored vectors (missing {}, orphaned {}, \
         unreachable {}); remove {} and start the server to rebuild it",
        first_keys(&check.missing),
        first_keys(&check.orphaned),
        first_keys(&check.unreachable),
        snapshot_path.display()
    );
    // The stored data is intact, and a start would serve (after rebuilding what the file
    // held), but saves replace the file atomically: a snapshot that does not load is a fault.
    if let SnapshotLoad::Unusable(reason) = snapshot {
        anyhow::bail!(
            "the vector snapshot {} does not load ({reason}); the store is intact: a start \
             rebuilds the index and its graph from the stored vectors (minutes for a large \
             store) and saves a good snapshot",
            snapshot_path.display()
        );
    }
    Ok(())
}

/// How many problems or keys a report shows at most: a damaged store can have thousands.
const SHOWN: usize = 10;

/// How many `keys` there are and the first few, as session key:message index (a damaged
/// index can list thousands).
fn first_keys(keys: &[MessageKey]) -> String {
    let shown: Vec<String> = keys
        .iter()
        .take(SHOWN)
        .map(|key| format!("{}:{}", key.session(), key.index()))
        .collect();
    let more = if keys.len() > SHOWN { ", …" } else { "" };
    format!("{} [{}{more}]", keys.len(), shown.join(", "))
}
