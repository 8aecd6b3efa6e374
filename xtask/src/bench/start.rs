//! `cargo xtask bench start`: issue 18's start at a million — a data directory holding a
//! million stored messages and a million long-term memories — timed until the server serves
//! from its graphs, and its memory measured then and after every user's memories were
//! recalled once.
//!
//! memlayer-bench's `recovery-fill` writes the store once through the real store: short chat
//! messages (one message of the corpus each, in conversations of 50) with a seeded vector
//! each, then memories with seeded vectors, 10,000 per user (see `recovery-fill` and the
//! `memory` benchmark for why the vectors are seeded), into a data directory under the target
//! directory that later runs of the same sizes reuse. Without a vector snapshot there, the
//! first build (the baseline, when there is one: the oldest format, which every later build
//! reads) first starts without one and builds its graph from the stored vectors (a quarter
//! of an hour at a million); its clean stop saves the snapshot every later start loads.
//! Within a run each build then keeps the snapshot its own stops saved (`vectors.idx.build-N`,
//! put in place before its starts): a newer build's format is one an older build cannot read,
//! and would rebuild its graph from the vectors. Each measured start (every build
//! and store cache setting in turn, the baseline first, `--rounds` times) is timed from spawn
//! until listening, ready, the keywords indexed and the message graph in place; then one
//! memory search for every user in turn loads each user's partition (past the resident
//! budget, the users used least recently leave memory), and the server's RSS is read after
//! that sweep before it stops. Each start with the snapshot follows an unmeasured start and
//! clean stop of the same build, as a restart of one version does. Before each stop, a few
//! conversations are erased one after another (`DELETE /v1/sessions/{id}`, each a different
//! one, so the builds erase alike), each timed to its receipt (a `202` is followed to it),
//! while another client reads a live conversation every 50 ms: the longest of those reads
//! (and how many the server's request timeout failed) is how long the erasures held up every
//! other request.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use serde::Deserialize;

use super::load_average;
use super::recovery::{Start, mib, started};
use crate::server::{Server, admin_client};
use crate::{cmd, metadata};

/// `recovery-fill` writes this many memories per user (memlayer-bench's `memory::PER_USER`).
const MEMORIES_PER_USER: usize = 10_000;
/// The vector snapshot in the data directory.
const SNAPSHOT: &str = "vectors.idx";
/// Asked of every user's memories in the sweep.
const QUESTION: &str = "Which food does she like to cook for her friends?";
/// Conversations erased after each measured start's sweep.
const ERASURES: usize = 3;
/// Counts the conversations the runs on a store erased, so that the next run erases others.
const ERASED_FILE: &str = "erased-sessions";

/// What memlayer-bench's `recovery-fill` printed.
#[derive(Deserialize)]
struct Filled {
    sessions: usize,
    messages: usize,
    memories: usize,
    mean_message_bytes: u64,
    file_bytes: u64,
    written_secs: f64,
}

/// A server measured: its name, binary and the environment it starts with.
struct Build {
    name: String,
    binary: std::path::PathBuf,
    env: Vec<(&'static str, String)>,
}

/// One start of one build.
struct Measured {
    build: String,
    /// Whether a vector snapshot was there to load.
    snapshot: bool,
    start: Start,
    /// One memory search for every user, one after another.
    sweep: Duration,
    rss_after_sweep_kib: u64,
    peak_rss_kib: u64,
    erasures: Erasures,
}

/// The erasures after one start's sweep.
struct Erasures {
    /// Each erasure's answer (`202` followed to its receipt: `202→200`) and time from
    /// request to receipt, or to the answer when that is not one.
    answers: Vec<(String, Duration)>,
    /// The longest read of another conversation while they ran.
    longest_read: Duration,
    /// Reads of it that failed (the server's request timeout answers `503`).
    failed_reads: usize,
}

pub(crate) fn run(
    root: &Path,
    messages: usize,
    memories: usize,
    cache_mib: &[usize],
    rounds: usize,
    baseline: Option<&Path>,
) -> anyhow::Result<()> {
    ensure!(rounds > 0, "give at least one round");
    cmd::cargo(root, &["build", "--release", "-p", "memlayer"])?;
    let target_dir = metadata::read(root)?.target_directory;
    let binary = target_dir.join("release").join("memlayer");
    let mut builds = Vec::new();
    if let Some(baseline) = baseline {
        builds.push(Build {
            name: format!("baseline `{}`", baseline.display()),
            binary: baseline.to_owned(),
            env: Vec::new(),
        });
    }
    if cache_mib.is_empty() {
        builds.push(Build {
            name: "this build".to_owned(),
            binary: binary.clone(),
            env: Vec::new(),
        });
    }
    for mib in cache_mib {
        builds.push(Build {
            name: format!("this build, `--store-cache-mib {mib}`"),
            binary: binary.clone(),
            env: vec![("MEMLAYER_STORE_CACHE_MIB", mib.to_string())],
        });
    }
    let log = target_dir.join("bench-start-server.log");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("could not start the runtime")?;
    // Kept between runs, as the index benchmark keeps its snapshots: writing the store takes
    // minutes and building its first graph a quarter of an hour. Delete it to start over.
    let data_dir = target_dir
        .join("bench-start")
        .join(format!("{messages}-messages-{memories}-memories"));
    let filled_file = data_dir.join("filled.json");
    let load_before = load_average()?;

    let filled = match std::fs::read_to_string(&filled_file) {
        Ok(filled) => {
            eprintln!("xtask: the store of an earlier run: {}", data_dir.display());
            filled
        }
        Err(_) => {
            // A store a failed run left part-written is no base for figures.
            let _ = std::fs::remove_dir_all(&data_dir);
            std::fs::create_dir_all(&data_dir)
                .context("could not create the benchmark's data directory")?;
            eprintln!("xtask: writing {messages} messages and {memories} memories");
            let filled = super::in_process_output(
                root,
                &[
                    "recovery-fill",
                    "--data-dir",
                    &data_dir.display().to_string(),
                    "--messages",
                    &messages.to_string(),
                    "--chat-per-message",
                    "1",
                    "--memories",
                    &memories.to_string(),
                ],
            )?;
            std::fs::write(&filled_file, &filled)?;
            filled
        }
    };
    let filled: Filled = serde_json::from_str(filled.trim())
        .with_context(|| format!("`memlayer-bench recovery-fill` printed {filled:?}"))?;
    let users = filled.memories.div_ceil(MEMORIES_PER_USER);
    let erased = Erased {
        file: data_dir.join(ERASED_FILE),
        sessions: filled.sessions,
    };

    let mut results = Vec::new();
    if !data_dir.join(SNAPSHOT).exists() {
        let first = builds.first().expect("this build is measured");
        eprintln!("xtask: {}: start without a snapshot", first.name);
        results.push(runtime.block_on(measure(first, &data_dir, &log, users, &erased, false))?);
    }
    let remove_own_snapshots = || {
        for index in 0..builds.len() {
            let _ = std::fs::remove_file(own_snapshot(&data_dir, index));
        }
    };
    remove_own_snapshots();
    for round in 1..=rounds {
        for (index, build) in builds.iter().enumerate() {
            eprintln!(
                "xtask: round {round}: {}: start with the snapshot",
                build.name
            );
            let own = own_snapshot(&data_dir, index);
            if own.exists() {
                std::fs::copy(&own, data_dir.join(SNAPSHOT))
                    .context("could not put a build's own snapshot in place")?;
            }
            results.push(runtime.block_on(measure(build, &data_dir, &log, users, &erased, true))?);
            std::fs::copy(data_dir.join(SNAPSHOT), &own)
                .context("could not keep a build's own snapshot")?;
        }
    }
    remove_own_snapshots();
    let load_after = load_average()?;
    println!(
        "{}",
        report(&filled, users, &results, [load_before, load_after])
    );
    Ok(())
}

/// Where the `index`th build's own snapshot waits between its starts within a run.
fn own_snapshot(data_dir: &Path, index: usize) -> std::path::PathBuf {
    data_dir.join(format!("{SNAPSHOT}.build-{index}"))
}

/// Starts `build`, waits for its graph, sweeps every user's memories once and stops it.
async fn measure(
    build: &Build,
    data_dir: &Path,
    log: &Path,
    users: usize,
    erased: &Erased,
    snapshot: bool,
) -> anyhow::Result<Measured> {
    if !snapshot {
        let _ = std::fs::remove_file(data_dir.join(SNAPSHOT));
    }
    let env: Vec<(&str, &str)> = build
        .env
        .iter()
        .map(|(name, value)| (*name, value.as_str()))
        .collect();
    if snapshot {
        // Each measured start follows a clean stop of the same build, as every restart of
        // one version does: a store file another build closed last (the first start after
        // an upgrade) has every page checked at open.
        let (server, _) = started(&build.binary, data_dir, log, &env).await?;
        server.stop()?;
    }
    let (server, start) = started(&build.binary, data_dir, log, &env).await?;
    let sweep_start = Instant::now();
    sweep(&server, users).await?;
    let sweep = sweep_start.elapsed();
    let rss_after_sweep_kib = server.rss_kib()?;
    let erasures = erase(&server, erased).await?;
    let peak_rss_kib = server.peak_rss_kib()?;
    server.stop()?;
    Ok(Measured {
        build: build.name.clone(),
        snapshot,
        start,
        sweep,
        rss_after_sweep_kib,
        peak_rss_kib,
        erasures,
    })
}

/// The conversations of the filled store (`recovery-0` …) and how many of them earlier
/// erasures took, from the last one down.
struct Erased {
    file: std::path::PathBuf,
    sessions: usize,
}

impl Erased {
    /// The next conversation to erase, counted as erased.
    fn next(&self) -> anyhow::Result<String> {
        let taken: usize = match std::fs::read_to_string(&self.file) {
            Ok(count) => count
                .trim()
                .parse()
                .context("an unreadable count of erasures")?,
            Err(_) => 0,
        };
        ensure!(
            taken < self.sessions,
            "every conversation of the store was erased"
        );
        std::fs::write(&self.file, (taken + 1).to_string())?;
        Ok(format!("recovery-{}", self.sessions - 1 - taken))
    }
}

/// Erases [`ERASURES`] conversations one after another, each timed to its receipt, while a
/// live conversation is read every 50 ms.
async fn erase(server: &Server, erased: &Erased) -> anyhow::Result<Erasures> {
    let http = admin_client(Duration::from_secs(120))?;
    let addr = server.addr();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The first conversation, which the erasures (from the last down) never reach.
    let reader = tokio::spawn({
        let (http, stop) = (http.clone(), stop.clone());
        async move {
            let (mut longest, mut failed) = (Duration::ZERO, 0);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let sent = Instant::now();
                let response = http
                    .get(format!("http://{addr}/v1/sessions/recovery-0"))
                    .send()
                    .await?;
                failed += usize::from(!response.status().is_success());
                longest = longest.max(sent.elapsed());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            anyhow::Ok((longest, failed))
        }
    });
    let mut answers = Vec::new();
    for _ in 0..ERASURES {
        let session = erased.next()?;
        let sent = Instant::now();
        let response = http
            .delete(format!("http://{addr}/v1/sessions/{session}"))
            .send()
            .await?;
        let status = response.status().as_u16();
        let answer = if status == 202 {
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .context("a 202 without Location")?
                .to_str()?
                .to_owned();
            format!("202→{}", receipt(&http, addr, &location).await?)
        } else {
            status.to_string()
        };
        answers.push((answer, sent.elapsed()));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (longest_read, failed_reads) = reader.await.context("the reading client panicked")??;
    Ok(Erasures {
        answers,
        longest_read,
        failed_reads,
    })
}

/// Polls a running erasure's `location` until its receipt; the status it ends with. A `503`
/// (the poll itself timed out while the compaction held every read up) is polled again.
async fn receipt(
    http: &reqwest::Client,
    addr: std::net::SocketAddr,
    location: &str,
) -> anyhow::Result<u16> {
    loop {
        let status = http
            .get(format!("http://{addr}{location}"))
            .send()
            .await?
            .status()
            .as_u16();
        if !matches!(status, 202 | 503) {
            return Ok(status);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One memory search for every user, in turn; each must find memories.
async fn sweep(server: &Server, users: usize) -> anyhow::Result<()> {
    let http = admin_client(Duration::from_secs(120))?;
    let addr = server.addr();
    for user in 0..users {
        let response = http
            .post(format!(
                "http://{addr}/v1/users/user-{user:06}/memories/search"
            ))
            .json(&serde_json::json!({ "query": QUESTION, "k": 5 }))
            .send()
            .await?;
        ensure!(
            response.status().is_success(),
            "the memory search answered {}",
            response.status()
        );
        let hits: serde_json::Value = response.json().await?;
        ensure!(
            hits["hits"].as_array().is_some_and(|hits| !hits.is_empty()),
            "the memory search of user {user} found nothing"
        );
    }
    Ok(())
}

fn report(filled: &Filled, users: usize, results: &[Measured], load: [String; 2]) -> String {
    let mut out = String::new();
    let command: Vec<String> = std::env::args().skip(1).collect();
    let _ = writeln!(out, "## Starting at a million messages and memories\n");
    let _ = writeln!(
        out,
        "Command: `cargo xtask {}`. Load average {} before / {} after. The store: {} messages \
         of {} bytes on average (one chat message of the corpus each, 50 to a conversation), \
         each with a stored 384-dimension vector, and {} long-term memories of {users} users, \
         each with its vector: a {:.0} MiB file, written in {:.0} s (kept for later runs; a \
         run's first start may find part of it out of the page cache). Times are seconds from spawn until the server listens / \
         is ready / has indexed the stored messages' keywords / searches messages through \
         its graph. Then one memory search for every \
         user in turn (each user's partition loaded, past the resident budget the least \
         recently used leave memory); RSS is read after it. Each start with a snapshot \
         follows a clean stop of the same build (an unmeasured start before it). A start without a snapshot \
         (the first on a new store) builds the graph from the stored vectors; its clean stop \
         saves the snapshot the others load.\n",
        command.join(" "),
        load[0],
        load[1],
        filled.messages,
        filled.mean_message_bytes,
        filled.memories,
        filled.file_bytes as f64 / (1024.0 * 1024.0),
        filled.written_secs,
    );
    let _ = writeln!(
        out,
        "| server | snapshot | listening / ready / keywords / graph s | peak RSS until the graph MiB | memory sweep s | RSS after the sweep MiB | peak RSS MiB | conversation erasures: answer, s to receipt | longest other read during them s (failed) |"
    );
    let _ = writeln!(
        out,
        "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: |"
    );
    for result in results {
        let start = &result.start;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {:.1} | {:.0} | {:.0} | {} | {:.2} ({}) |",
            result.build,
            if result.snapshot { "loaded" } else { "none" },
            start.times(),
            mib(start.peak_rss_kib),
            result.sweep.as_secs_f64(),
            mib(result.rss_after_sweep_kib),
            mib(result.peak_rss_kib),
            result
                .erasures
                .answers
                .iter()
                .map(|(answer, took)| format!("{answer} {:.1}", took.as_secs_f64()))
                .collect::<Vec<_>>()
                .join(", "),
            result.erasures.longest_read.as_secs_f64(),
            result.erasures.failed_reads,
        );
    }
    out
}
