//! `cargo xtask bench recovery`: how long a data directory of a given size takes to open and
//! to serve again after a stop or crash. The store verifies every page checksum when it opens,
//! and a start rebuilds the vector and keyword indexes from the store, so both grow with the
//! data; this measures how.
//!
//! One data directory is grown through the real store to each size in turn (`--sizes-mib`)
//! by memlayer-bench's `recovery-fill`: conversations of long messages appended in batches,
//! and for every message a vector stored through `Store::store_embeddings`, as the embedding
//! pipeline stores them — seeded vectors around real embeddings of a few topics, since
//! embedding a gigabyte of text with the model would take hours here. At each size it times,
//! with nothing else running on the directory: `Store::open` alone (in memlayer-bench, after
//! the fill), `memlayer check --data-dir` (store, model, index
//! rebuild, and a search for every stored vector), and `memlayer serve` from spawn until
//! `/readyz` answers, until the stored messages' keywords are indexed and until its vector
//! index has its HNSW graph (both done in the background after the server is ready;
//! `memlayer_index_keywords_pending` and `memlayer_index_graph_pending` in `/metrics`): first
//! without a vector snapshot, then with the snapshot a clean stop writes, then after a crash
//! that left the snapshot stale (one message appended and embedded after it was saved, then
//! SIGKILL). `--baseline` times the starts of another build the same way, just before this
//! build's.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use serde::Deserialize;

use super::load_average;
use crate::server::{Server, admin_client};
use crate::{cmd, metadata};

/// A start that rebuilds the index of a large store takes minutes; this bounds a broken one.
const START_TIMEOUT: Duration = Duration::from_secs(3_600);

/// What memlayer-bench's `recovery-fill` printed: the store after it grew.
#[derive(Deserialize)]
struct Filled {
    sessions: usize,
    messages: usize,
    mean_message_bytes: u64,
    file_bytes: u64,
    store_open_secs: f64,
    messages_per_session: usize,
}

/// Figures at one size.
struct Measured {
    file_bytes: u64,
    messages: usize,
    messages_per_session: usize,
    store_open: Duration,
    check: Duration,
    check_verdict: String,
    /// Per build measured (the baseline first): its name, a start without the snapshot, one
    /// with it, and one with it stale.
    starts: Vec<(String, [Start; 3])>,
}

/// One start, timed from spawn.
pub(super) struct Start {
    pub(super) listening: Duration,
    pub(super) ready: Duration,
    /// Until keyword recall covers every stored message.
    pub(super) keywords: Duration,
    /// Until the vector index searches through its graph.
    pub(super) graph: Duration,
    /// The server's peak resident memory by then (`VmHWM`), in KiB.
    pub(super) peak_rss_kib: u64,
}

pub(crate) fn run(root: &Path, sizes_mib: &[u64], baseline: Option<&Path>) -> anyhow::Result<()> {
    ensure!(
        sizes_mib.is_sorted() && !sizes_mib.is_empty(),
        "give the sizes in increasing order"
    );
    cmd::cargo(root, &["build", "--release", "-p", "memlayer"])?;
    let target_dir = metadata::read(root)?.target_directory;
    let binary = target_dir.join("release").join("memlayer");
    let mut builds = Vec::new();
    if let Some(baseline) = baseline {
        builds.push((
            format!("baseline `{}`", baseline.display()),
            baseline.to_owned(),
        ));
    }
    builds.push(("this build".to_owned(), binary.clone()));
    let log = target_dir.join("bench-recovery-server.log");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("could not start the runtime")?;
    let data_dir = tempfile::Builder::new()
        .prefix("memlayer-bench-recovery-")
        .tempdir_in(&target_dir)
        .context("could not create the benchmark's data directory")?;
    let load_before = load_average()?;
    let mut sessions = 0;
    let mut results = Vec::new();
    let mut message_bytes = 0;
    for &mib in sizes_mib {
        eprintln!("xtask: growing the store to {mib} MiB");
        let filled = super::in_process_output(
            root,
            &[
                "recovery-fill",
                "--data-dir",
                &data_dir.path().display().to_string(),
                "--mib",
                &mib.to_string(),
                "--first-session",
                &sessions.to_string(),
            ],
        )?;
        let filled: Filled = serde_json::from_str(filled.trim())
            .with_context(|| format!("`memlayer-bench recovery-fill` printed {filled:?}"))?;
        sessions = filled.sessions;
        if message_bytes == 0 {
            message_bytes = filled.mean_message_bytes;
        }
        // A clean stop leaves a snapshot; the first measured start must rebuild from the
        // store, as after a crash.
        let _ = std::fs::remove_file(data_dir.path().join("vectors.idx"));

        eprintln!("xtask: memlayer check");
        let start = Instant::now();
        let output = Command::new(&binary)
            .arg("check")
            .arg("--data-dir")
            .arg(data_dir.path())
            .stdout(Stdio::null())
            .output()
            .context("could not run `memlayer check`")?;
        let check = start.elapsed();
        // The check's time stands whatever it finds. Its verdict goes in the report: on
        // these seeded clusters (denser than real chat) the HNSW search for each stored
        // vector has missed a few, which the check reports as unreachable.
        let check_verdict = if output.status.success() {
            "ok".to_owned()
        } else {
            eprintln!("{}", String::from_utf8_lossy(&output.stderr));
            let stderr = String::from_utf8_lossy(&output.stderr);
            let not_found = stderr
                .split_once("unreachable ")
                .and_then(|(_, rest)| rest.split(' ').next())
                .unwrap_or("?");
            format!("failed ({}, {not_found} unreachable)", output.status)
        };

        let mut starts = Vec::new();
        for (name, build) in &builds {
            let _ = std::fs::remove_file(data_dir.path().join("vectors.idx"));
            eprintln!("xtask: {name}: start without a snapshot");
            let no_snapshot = runtime.block_on(timed_start(build, data_dir.path(), &log))?;
            eprintln!("xtask: {name}: start with the snapshot");
            let with_snapshot = runtime.block_on(timed_start(build, data_dir.path(), &log))?;
            eprintln!("xtask: {name}: start after a crash that left the snapshot stale");
            runtime.block_on(crash_after_the_snapshot(build, data_dir.path(), &log))?;
            let stale_snapshot = runtime.block_on(timed_start(build, data_dir.path(), &log))?;
            starts.push((name.clone(), [no_snapshot, with_snapshot, stale_snapshot]));
        }
        results.push(Measured {
            file_bytes: filled.file_bytes,
            messages: filled.messages,
            messages_per_session: filled.messages_per_session,
            store_open: Duration::from_secs_f64(filled.store_open_secs),
            check,
            check_verdict,
            starts,
        });
    }
    let load_after = load_average()?;
    println!(
        "{}",
        report(&results, message_bytes, [load_before, load_after])
    );
    Ok(())
}

/// Starts the server, waits until it is ready and then until its vector graph is built, and
/// stops it cleanly.
async fn timed_start(binary: &Path, data_dir: &Path, log: &Path) -> anyhow::Result<Start> {
    let (server, start) = started(binary, data_dir, log, &[]).await?;
    server.stop()?;
    Ok(start)
}

/// Starts the server with `env` added to its environment and waits until it is ready, then
/// until its keywords are indexed and its vector graph is there; returns it running.
pub(super) async fn started(
    binary: &Path,
    data_dir: &Path,
    log: &Path,
    env: &[(&str, &str)],
) -> anyhow::Result<(Server, Start)> {
    let start = Instant::now();
    let server = Server::start_with(binary, data_dir, log, START_TIMEOUT, env)?;
    let listening = start.elapsed();
    let http = admin_client(Duration::from_secs(10))?;
    let addr = server.addr();
    wait_for(&http, addr, "readyz", |response| async move {
        response.status().is_success()
    })
    .await?;
    let ready = start.elapsed();
    // Watched at once: each is timed on its own, not after the other.
    let (keywords, graph) = tokio::join!(
        done_after(&http, addr, start, "memlayer_index_keywords_pending"),
        done_after(&http, addr, start, "memlayer_index_graph_pending"),
    );
    let (keywords, graph) = (keywords?, graph?);
    let peak_rss_kib = server.peak_rss_kib()?;
    Ok((
        server,
        Start {
            listening,
            ready,
            keywords,
            graph,
            peak_rss_kib,
        },
    ))
}

/// Starts the server on its snapshot, appends one message, waits until it is embedded (the
/// stored vectors then differ from the snapshot's) and kills the server with SIGKILL, as a
/// crash before the next save does.
async fn crash_after_the_snapshot(
    binary: &Path,
    data_dir: &Path,
    log: &Path,
) -> anyhow::Result<()> {
    let mut server = Server::start_with(binary, data_dir, log, START_TIMEOUT, &[])?;
    let http = admin_client(Duration::from_secs(10))?;
    let addr = server.addr();
    wait_for(&http, addr, "readyz", |response| async move {
        response.status().is_success()
    })
    .await?;
    let appended = http
        .post(format!("http://{addr}/v1/sessions/recovery-crash/messages"))
        .json(&serde_json::json!({
            "user_id": "recovery-crash",
            "agent_id": "bench",
            "messages": [{"role": "user", "content": "One more message after the snapshot."}],
        }))
        .send()
        .await?;
    ensure!(
        appended.status().is_success(),
        "the append answered {}",
        appended.status()
    );
    done_after(&http, addr, Instant::now(), "memlayer_embeddings_pending").await?;
    server.kill()
}

/// Time from `start` until `/metrics` shows the gauge `pending` at 0. A build without the
/// gauge (older than the background work it reports) did that work before it was ready.
async fn done_after(
    http: &reqwest::Client,
    addr: SocketAddr,
    start: Instant,
    pending: &'static str,
) -> anyhow::Result<Duration> {
    wait_for(http, addr, "metrics", |response| async move {
        response
            .text()
            .await
            .is_ok_and(|text| text.contains(&format!("{pending} 0\n")) || !text.contains(pending))
    })
    .await?;
    Ok(start.elapsed())
}

/// Polls `path` of the server until `done` says its answer is the awaited one.
pub(super) async fn wait_for<F, Fut>(
    http: &reqwest::Client,
    addr: SocketAddr,
    path: &str,
    done: F,
) -> anyhow::Result<()>
where
    F: Fn(reqwest::Response) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(response) = http.get(format!("http://{addr}/{path}")).send().await
            && done(response).await
        {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "the server listened but /{path} did not say so within {} s",
            START_TIMEOUT.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn secs(duration: Duration) -> f64 {
    duration.as_secs_f64()
}

impl Start {
    fn row(&self) -> String {
        format!(
            "{}; peak RSS {:.0} MiB",
            self.times(),
            mib(self.peak_rss_kib)
        )
    }

    /// Seconds until listening / ready / keywords / graph.
    pub(super) fn times(&self) -> String {
        format!(
            "{:.1} / {:.1} / {:.1} / {:.1}",
            secs(self.listening),
            secs(self.ready),
            secs(self.keywords),
            secs(self.graph),
        )
    }
}

/// KiB as MiB, for the reports.
pub(super) fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn report(results: &[Measured], message_bytes: u64, load: [String; 2]) -> String {
    let mut out = String::new();
    let command: Vec<String> = std::env::args().skip(1).collect();
    let _ = writeln!(out, "## Recovery time by store size\n");
    let _ = writeln!(
        out,
        "Command: `cargo xtask {}`. Load average {} before / {} after. One data directory \
         grown to each size through the real store: conversations of {} messages of about \
         {:.1} KB each (corpus chat text), every message with a stored 384-dimension vector. \
         The file is in the page cache (it was just written): a cold disk adds its read \
         time. Starts are timed from spawn; the server listens once the store is open and \
         the indexes are loaded (vectors, every message's session and filter fields); the \
         stored messages' keywords and the HNSW graph of the message vectors are built after \
         that in the background (keyword recall misses older messages and vector searches \
         scan every vector until then). Builds older than that work did it before they \
         were ready. The peak RSS is the server's `VmHWM` once its graph is there.\n",
        command.join(" "),
        load[0],
        load[1],
        results
            .first()
            .map_or(0, |result| result.messages_per_session),
        message_bytes as f64 / 1000.0,
    );
    let _ = writeln!(
        out,
        "| store file MiB | messages (= vectors) | `Store::open` s | `memlayer check` s | check verdict | server | start, no snapshot: listening / ready / keywords / graph s; peak RSS until then | start with snapshot: the same | start after a crash, snapshot stale: the same |"
    );
    let _ = writeln!(
        out,
        "| ---: | ---: | ---: | ---: | --- | --- | --- | --- | --- |"
    );
    for result in results {
        for (name, [no_snapshot, with_snapshot, stale_snapshot]) in &result.starts {
            let _ = writeln!(
                out,
                "| {:.0} | {} | {:.2} | {:.1} | {} | {name} | {} | {} | {} |",
                result.file_bytes as f64 / (1024.0 * 1024.0),
                result.messages,
                secs(result.store_open),
                secs(result.check),
                result.check_verdict,
                no_snapshot.row(),
                with_snapshot.row(),
                stale_snapshot.row(),
            );
        }
    }
    out
}
