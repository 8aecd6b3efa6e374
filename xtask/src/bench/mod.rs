//! `cargo xtask bench <benchmark>`: every benchmark behind one command. The ones that measure
//! through HTTP and process control run here — durable appends against a release server
//! (`appends`, with the store's commit modes from memlayer-bench), appends through several
//! nodes on one PostgreSQL database (`nodes`), a purge through the server (`purge`) and a
//! store's recovery (`recovery`) and a start at a million messages and memories (`start`),
//! whose stores memlayer-bench fills — and the
//! in-process ones (`embed`, `index`, `context`, `memory`) are memlayer-bench's, run as a
//! release-built child process so that xtask links no memlayer crate. `all` runs them all and
//! writes docs/benchmarks.md.

mod all;
mod appends;
pub(crate) mod load;
mod nodes;
mod purge;
mod recovery;
mod start;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use clap::Subcommand;

pub(crate) use load::{percentile, sentence};

use crate::{cmd, metadata, setup};

#[derive(Subcommand)]
pub(crate) enum Benchmark {
    /// Durable HTTP appends and a turn's context against a fresh release-mode server, then
    /// the store's commit modes in process.
    Appends {
        /// How long each scenario is measured, after a one-second warm-up.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Another build of the server (an older commit's `memlayer` binary) measured first,
        /// for a side-by-side comparison in one run.
        #[arg(long)]
        baseline: Option<PathBuf>,
        /// Measure this build a second time with its records in PostgreSQL (a database of a
        /// throwaway cluster, `--database-url`), beside the store file in the same run.
        #[arg(long)]
        postgres: bool,
    },
    /// Embedding throughput, Rust against Python onnxruntime on the same model.
    Embed {
        /// Options of memlayer-bench's `embed` (`cargo run -p memlayer-bench -- embed --help`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The vector index (HNSW against the exact scan) on real embeddings of chat text.
    Index {
        /// Options of memlayer-bench's `index`: `--sizes 10000,100000`, `--queries 1000`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Erasing single vectors from one index of real embeddings grown to a million by noisy
    /// copies, built once (minutes) and kept as a snapshot in the target directory.
    IndexErase {
        /// Options of memlayer-bench's `index-erase`: `--vectors 1000000`, `--erasures 5`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// One turn's context for a long session (combined strategy, every layer) on a real
    /// store, recall pipeline and embedder, with a breakdown of where the time goes.
    Context {
        /// Options of memlayer-bench's `context`: `--turns 1000`, `--iterations 300`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Long-term memory recall with 10,000 memories per user, one user or many, on a real
    /// store and the real indexes (memories stored with seeded vectors).
    Memory {
        /// Options of memlayer-bench's `memory`: `--sizes 10000,100000`, `--queries 500`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// A purge of many conversations through the real server: time and disk space given
    /// back.
    Purge {
        /// Conversations (two messages each) appended, then purged.
        #[arg(long, default_value_t = 100_000)]
        sessions: usize,
        /// Another build of `memlayer` (an older commit's) to measure the same way first.
        #[arg(long)]
        baseline: Option<PathBuf>,
        /// Measure this build a second time with its records in PostgreSQL (a database of a
        /// throwaway cluster), beside the store file in the same run.
        #[arg(long)]
        postgres: bool,
    },
    /// Durable HTTP appends through 1, 2, … nodes sharing one PostgreSQL database (a
    /// throwaway cluster), the clients spread over the nodes, and the feed lag from one node
    /// to another's recall.
    Nodes {
        /// How long each scenario is measured, after a one-second warm-up.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// The most nodes measured: every count from 1 up to it.
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// Another build of `memlayer` (an older commit's) to measure the same way first.
        #[arg(long)]
        baseline: Option<PathBuf>,
    },
    /// How long a store of each size takes to open, to check and to serve again.
    Recovery {
        /// Store file sizes in MiB, increasing; one data directory is grown through them.
        #[arg(long, value_delimiter = ',', default_values_t = [250, 500, 1000])]
        sizes_mib: Vec<u64>,
        /// Another build of `memlayer` (an older commit's) whose starts are timed the same
        /// way, before this build's, at each size.
        #[arg(long)]
        baseline: Option<PathBuf>,
    },
    /// A start with a million stored messages and a million long-term memories: until it
    /// serves from its graphs, and its memory before and after every user's memories are
    /// recalled once.
    Start {
        /// Messages in the store, each with a vector.
        #[arg(long, default_value_t = 1_000_000)]
        messages: usize,
        /// Long-term memories in the store, 10,000 per user.
        #[arg(long, default_value_t = 1_000_000)]
        memories: usize,
        /// Store page cache sizes this build is started with in turn
        /// (`MEMLAYER_STORE_CACHE_MIB`); none starts it with its default.
        #[arg(long, value_delimiter = ',')]
        cache_mib: Vec<usize>,
        /// Starts of every build measured, alternated.
        #[arg(long, default_value_t = 2)]
        rounds: usize,
        /// Another build of `memlayer` (an older commit's) started the same way first in
        /// every round, on the snapshot this build saved.
        #[arg(long)]
        baseline: Option<PathBuf>,
    },
    /// Every benchmark above, one after the other, and docs/benchmarks.md written from their
    /// reports, keeping its hand-written part.
    All {
        /// Smaller sizes and fewer iterations, for a run of minutes.
        #[arg(long)]
        quick: bool,
    },
}

impl Benchmark {
    /// Whether the benchmark measures in xtask's own process (an HTTP client, timed
    /// starts), which a debug build of xtask would slow down; the others run memlayer-bench.
    pub(crate) fn measures_in_xtask(&self) -> bool {
        matches!(
            self,
            Self::Appends { .. }
                | Self::Nodes { .. }
                | Self::Purge { .. }
                | Self::Recovery { .. }
                | Self::Start { .. }
                | Self::All { .. }
        )
    }
}

pub(crate) fn run(root: &Path, benchmark: Benchmark) -> anyhow::Result<()> {
    match benchmark {
        Benchmark::Appends {
            seconds,
            baseline,
            postgres,
        } => appends::run(root, seconds, baseline.as_deref(), postgres),
        Benchmark::Embed { args } => in_process(root, "embed", &args),
        Benchmark::Index { args } => in_process(root, "index", &args),
        Benchmark::IndexErase { args } => in_process(root, "index-erase", &args),
        Benchmark::Context { args } => in_process(root, "context", &args),
        Benchmark::Memory { args } => in_process(root, "memory", &args),
        Benchmark::Purge {
            sessions,
            baseline,
            postgres,
        } => purge::run(root, sessions, baseline.as_deref(), postgres),
        Benchmark::Nodes {
            seconds,
            nodes,
            baseline,
        } => nodes::run(root, seconds, nodes, baseline.as_deref()),
        Benchmark::Recovery {
            sizes_mib,
            baseline,
        } => recovery::run(root, &sizes_mib, baseline.as_deref()),
        Benchmark::Start {
            messages,
            memories,
            cache_mib,
            rounds,
            baseline,
        } => start::run(
            root,
            messages,
            memories,
            &cache_mib,
            rounds,
            baseline.as_deref(),
        ),
        Benchmark::All { quick } => all::run(root, quick),
    }
}

/// Runs a memlayer-bench subcommand, passing `args` on, with its report going straight to
/// stdout. The subcommand checks and documents its own options.
fn in_process(root: &Path, benchmark: &str, args: &[String]) -> anyhow::Result<()> {
    let mut all = vec![benchmark];
    all.extend(args.iter().map(String::as_str));
    cmd::run(memlayer_bench(root, &all)?)
}

/// Builds memlayer-bench in release mode (a debug build would measure itself) and returns
/// the command that runs it with `args`, the assets `cargo xtask setup` installed and the
/// target directory for its caches.
fn memlayer_bench(root: &Path, args: &[&str]) -> anyhow::Result<Command> {
    let assets = setup::run(root)?;
    cmd::cargo(
        root,
        &["build", "--quiet", "--release", "-p", "memlayer-bench"],
    )?;
    let target_dir = metadata::read(root)?.target_directory;
    let mut command = Command::new(target_dir.join("release").join("memlayer-bench"));
    command
        .args(args)
        .current_dir(root)
        .env("MEMLAYER_ASSETS_DIR", assets)
        .env("MEMLAYER_BENCH_TARGET_DIR", &target_dir);
    Ok(command)
}

/// Runs a memlayer-bench subcommand and returns what it printed on stdout.
fn in_process_output(root: &Path, args: &[&str]) -> anyhow::Result<String> {
    let command = memlayer_bench(root, args)?;
    cmd::output(command).with_context(|| format!("`memlayer-bench {}` failed", args.join(" ")))
}

/// The 1-minute load average, the first field of `/proc/loadavg`.
pub(crate) fn load_average() -> anyhow::Result<String> {
    let text = std::fs::read_to_string("/proc/loadavg").context("could not read /proc/loadavg")?;
    Ok(text
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned())
}
