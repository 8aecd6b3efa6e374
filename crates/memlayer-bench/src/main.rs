//! `memlayer-bench`: the benchmarks that run memlayer's crates in this process — embedding
//! throughput against Python onnxruntime (`embed`), the vector index against the exact scan
//! (`index`), one turn's context (`context`), long-term memory recall (`memory`), the store's
//! commit modes (`commit-modes`) and the store filling of the recovery benchmark
//! (`recovery-fill`) — and `corpus`, the one generator of their synthetic texts. It is a
//! developer tool, never published: `cargo xtask bench` builds it in release mode and runs it
//! (with the assets `cargo xtask setup` installed), and writes docs/benchmarks.md from what it
//! prints. No crate depends on it (checked by `cargo xtask tidy`): product crates must not
//! carry benchmark code, and xtask stays free of product crates by running it as a process.
//!
//! Each subcommand takes the options of the `cargo xtask bench` subcommand of the same name
//! and prints its markdown report on stdout, progress on stderr; `commit-modes` prints a table
//! that `cargo xtask bench appends` puts in its report, and `recovery-fill` one JSON line.

mod commit;
mod context;
mod corpus;
mod embed;
mod index;
mod memory;
mod recovery;
mod report;

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use memlayer_embed::Assets;

#[derive(Parser)]
#[command(
    name = "memlayer-bench",
    about = "memlayer's in-process benchmarks (run them through `cargo xtask bench`)"
)]
struct Cli {
    /// Where `cargo xtask setup` installed ONNX Runtime and the model.
    #[arg(long, env = "MEMLAYER_ASSETS_DIR", global = true)]
    assets: Option<PathBuf>,
    /// Cargo's target directory, where the benchmarks keep caches and the Python venv; by
    /// default the one this binary was built in.
    #[arg(long, env = "MEMLAYER_BENCH_TARGET_DIR", global = true)]
    target_dir: Option<PathBuf>,
    #[command(subcommand)]
    benchmark: Benchmark,
}

#[derive(Subcommand)]
enum Benchmark {
    /// The store's commit modes side by side, in process: a markdown table on stdout.
    CommitModes,
    /// Embedding throughput, Rust against Python onnxruntime on the same model.
    Embed,
    /// The vector index (HNSW against the exact scan) on real embeddings of chat text.
    Index {
        /// Corpus sizes, each measured on its own index.
        #[arg(long, value_delimiter = ',', default_values_t = [10_000, 100_000])]
        sizes: Vec<usize>,
        /// Questions asked of each index.
        #[arg(long, default_value_t = 1000)]
        queries: usize,
    },
    /// Erasing single vectors from one index of real embeddings grown to a million (issue
    /// 18's size) by noisy copies; the index is built once and kept as a snapshot.
    IndexErase {
        /// Vectors in the index.
        #[arg(long, default_value_t = 1_000_000)]
        vectors: usize,
        /// Vectors erased, one at a time.
        #[arg(long, default_value_t = 5)]
        erasures: usize,
        /// Questions searched before and after.
        #[arg(long, default_value_t = 100)]
        queries: usize,
    },
    /// One turn's context for a long session (combined strategy, every layer) on a real
    /// store, recall pipeline and embedder, with a breakdown of where the time goes.
    Context {
        /// Turns (a user message and an answer each) in the session the context is for.
        #[arg(long, default_value_t = 1000)]
        turns: usize,
        /// Timed iterations; each builds four contexts and times each part once.
        #[arg(long, default_value_t = 300)]
        iterations: usize,
    },
    /// Long-term memory recall with 10,000 memories per user, one user or many, on a real
    /// store and the real indexes (memories stored with seeded vectors).
    Memory {
        /// Memories in the store, each size measured on its own store; 10,000 per user.
        #[arg(long, value_delimiter = ',', default_values_t = [10_000, 100_000])]
        sizes: Vec<usize>,
        /// Questions asked at each size.
        #[arg(long, default_value_t = 500)]
        queries: usize,
    },
    /// Grow the store of a data directory through the real store (conversations and their
    /// vectors, then long-term memories), then time `Store::open`; prints what it wrote as
    /// one JSON line.
    RecoveryFill {
        /// The data directory; its `memlayer.redb` is created or grown.
        #[arg(long)]
        data_dir: PathBuf,
        /// The store file's size to reach with messages, in MiB.
        #[arg(
            long,
            required_unless_present = "messages",
            conflicts_with = "messages"
        )]
        mib: Option<u64>,
        /// Messages to write instead (this call's, rounded up to whole rounds of appends).
        #[arg(long)]
        messages: Option<usize>,
        /// Chat messages of the corpus per stored message: 40 make a long answer of some
        /// 5 KB, 1 a chat message of about 130 bytes.
        #[arg(long, default_value_t = 40)]
        chat_per_message: usize,
        /// Long-term memories to write after the messages, 10,000 per user.
        #[arg(long, default_value_t = 0)]
        memories: usize,
        /// Sessions already written by earlier calls on this directory.
        #[arg(long, default_value_t = 0)]
        first_session: usize,
    },
    /// `index`'s child: loads one snapshot in a process of its own and prints its peak
    /// resident memory as one JSON line.
    #[command(hide = true)]
    SnapshotLoad {
        #[arg(long)]
        snapshot: PathBuf,
        #[arg(long)]
        dimension: usize,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let root = workspace_root();
    let assets = Assets::in_dir(
        cli.assets
            .clone()
            .unwrap_or_else(|| root.join("memlayer-assets")),
    );
    let target_dir = match cli.target_dir {
        Some(dir) => dir,
        None => built_in()?,
    };
    match cli.benchmark {
        Benchmark::CommitModes => print!("{}", commit::run()?),
        Benchmark::Embed => embed::run(&root, &assets, &target_dir)?,
        Benchmark::Index { sizes, queries } => {
            index::run(&root, &assets, &target_dir, &sizes, queries)?;
        }
        Benchmark::IndexErase {
            vectors,
            erasures,
            queries,
        } => index::erase::run(&assets, &target_dir, vectors, erasures, queries)?,
        Benchmark::Context { turns, iterations } => context::run(&assets, turns, iterations)?,
        Benchmark::Memory { sizes, queries } => memory::run(&assets, &sizes, queries)?,
        Benchmark::RecoveryFill {
            data_dir,
            mib,
            messages,
            chat_per_message,
            memories,
            first_session,
        } => {
            let goal = match (mib, messages) {
                (Some(mib), _) => recovery::Goal::FileBytes(mib * 1024 * 1024),
                (None, Some(messages)) => recovery::Goal::Messages(messages),
                (None, None) => anyhow::bail!("give --mib or --messages"),
            };
            let shape = recovery::Shape {
                goal,
                chat_per_message,
                memories,
            };
            recovery::run(&assets, &data_dir, &shape, first_session)?;
        }
        Benchmark::SnapshotLoad {
            snapshot,
            dimension,
        } => index::load_alone(&snapshot, dimension)?,
    }
    Ok(())
}

/// The workspace root, fixed at compile time, for the reference script and for shorter
/// paths in the reports.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("memlayer-bench lives two levels below the workspace root")
        .to_path_buf()
}

/// The target directory this binary was built in: `<target>/release/memlayer-bench`.
fn built_in() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find the running memlayer-bench")?;
    exe.ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .context("memlayer-bench does not run from a cargo target directory")
}
