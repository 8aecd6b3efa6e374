//! `cargo xtask bench purge`: how long the real server takes to purge many conversations and
//! how much disk the purge gives back. A release server on a fresh data directory receives
//! `--sessions` small conversations (one user message and one answer each, one append per
//! conversation, 64 clients at once so the store's group commit batches them); then
//! `DELETE /v1/admin/conversations/purge?older_than_days=0` erases all of them through the
//! erasure coordinator, which compacts the store file before it answers.
//!
//! The appends arrive far faster than the model embeds them, so when the purge starts most
//! conversations still wait in the embedding outbox — the case a bulk import followed by a
//! purge creates, and the one where a delete that scanned the whole outbox per session was
//! quadratic. Before the purge, [`MESSAGE_ERASURES`] single messages are erased one after
//! another, each timed from the request to its receipt. `--baseline` runs the same measurement with another build of the server (an
//! older commit's) right before, for a before/after comparison in one run; `--postgres`
//! measures this build once more with its records in PostgreSQL (a database of a throwaway
//! cluster), where the sizes are the database's and the purge's receipt waits for the
//! reclaim of the destroyed keys.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use serde::Serialize;

use super::{load_average, sentence};
use crate::helper::Helper;
use crate::server::{Server, admin_client};
use crate::{cmd, metadata};

/// Clients appending at once.
const CLIENTS: usize = 64;
/// A purge of 100,000 conversations writes for minutes; the request must outlast it.
const PURGE_TIMEOUT: Duration = Duration::from_secs(3_600);
const APPEND_TIMEOUT: Duration = Duration::from_secs(60);
/// Single messages erased, one at a time, before the purge.
const MESSAGE_ERASURES: usize = 10;
/// Users the conversations are spread over.
const USERS: usize = 1_000;
/// The fresh server starts in seconds; this only bounds a broken start.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Serialize)]
struct Append<'a> {
    user_id: String,
    agent_id: &'a str,
    messages: [Message; 2],
}

#[derive(Serialize)]
struct Message {
    role: &'static str,
    content: String,
}

/// One server build's figures.
struct Measured {
    label: String,
    load: Duration,
    pending_at_purge: Option<u64>,
    bytes_before: u64,
    /// Each single message's erasure, request to receipt, sorted.
    message_erasures: Vec<Duration>,
    purge: Duration,
    erased_sessions: u64,
    erased_messages: u64,
    bytes_after: u64,
}

pub(crate) fn run(
    root: &Path,
    sessions: usize,
    baseline: Option<&Path>,
    postgres: bool,
) -> anyhow::Result<()> {
    ensure!(sessions > 0, "give at least one session");
    cmd::cargo(root, &["build", "--release", "-p", "memlayer"])?;
    let target_dir = metadata::read(root)?.target_directory;
    let current = target_dir.join("release").join("memlayer");
    let log = target_dir.join("bench-purge-server.log");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("could not start the client runtime")?;
    let load_before = load_average()?;
    let mut builds: Vec<(String, PathBuf, Option<Helper>)> = Vec::new();
    if let Some(baseline) = baseline {
        builds.push((
            format!("baseline (`{}`)", baseline.display()),
            baseline.to_owned(),
            None,
        ));
    }
    builds.push(("this build".to_owned(), current.clone(), None));
    if postgres {
        let database = Helper::test_database(root, &target_dir)?;
        builds.push(("this build, PostgreSQL".to_owned(), current, Some(database)));
    }
    let mut results = Vec::new();
    for (label, binary, mut database) in builds {
        eprintln!("xtask: {label}: {sessions} conversations, then a purge");
        let store = match database.as_mut() {
            Some(database) => Records::Database(database),
            None => Records::File,
        };
        results.push(runtime.block_on(measure(label, &binary, store, &log, sessions))?);
    }
    let load_after = load_average()?;
    println!("{}", report(&results, sessions, [load_before, load_after]));
    Ok(())
}

/// Where the server under test keeps its records.
enum Records<'a> {
    /// The store file in its data directory.
    File,
    /// The database of a `test-database` helper.
    Database(&'a mut Helper),
}

impl Records<'_> {
    /// The records' size in bytes: the store file's, or the database's.
    fn size(&mut self, data_dir: &Path) -> anyhow::Result<u64> {
        match self {
            Self::File => Ok(std::fs::metadata(data_dir.join("memlayer.redb"))?.len()),
            Self::Database(database) => {
                let answer = database.ask("size")?;
                answer
                    .parse()
                    .with_context(|| format!("test-database answered {answer:?} for its size"))
            }
        }
    }
}

async fn measure(
    label: String,
    binary: &Path,
    mut records: Records<'_>,
    log: &Path,
    sessions: usize,
) -> anyhow::Result<Measured> {
    let data_dir = tempfile::Builder::new()
        .prefix("memlayer-bench-purge-")
        .tempdir()
        .context("could not create the benchmark's data directory")?;
    // A purge longer than half the request timeout answers 202 and goes on (it is polled
    // below); a long timeout keeps the answer to the one request for most sizes.
    let timeout = PURGE_TIMEOUT.as_secs().to_string();
    let mut env = vec![("MEMLAYER_REQUEST_TIMEOUT_SECS", timeout.as_str())];
    if let Records::Database(database) = &records {
        env.push(("MEMLAYER_DATABASE_URL", database.line.as_str()));
    }
    let server = Server::start_with(binary, data_dir.path(), log, STARTUP_TIMEOUT, &env)?;
    let http = admin_client(APPEND_TIMEOUT)?;

    let start = Instant::now();
    append_all(&http, server.addr(), sessions).await?;
    let load = start.elapsed();
    let pending_at_purge = pending_embeddings(&http, server.addr()).await;
    let bytes_before = records.size(data_dir.path())?;

    let mut message_erasures = Vec::new();
    for session in 0..MESSAGE_ERASURES.min(sessions) {
        let start = Instant::now();
        let response = http
            .delete(format!(
                "http://{}/v1/sessions/purge-{session}/messages/0",
                server.addr()
            ))
            .send()
            .await?;
        let status = response.status();
        ensure!(
            status == reqwest::StatusCode::OK,
            "a message's erasure answered {status}: {}",
            response.text().await?
        );
        message_erasures.push(start.elapsed());
    }
    message_erasures.sort();

    eprintln!("xtask: purging");
    let purge_client = admin_client(PURGE_TIMEOUT)?;
    let start = Instant::now();
    let response = purge_client
        .delete(format!(
            "http://{}/v1/admin/conversations/purge?older_than_days=0",
            server.addr()
        ))
        .send()
        .await?;
    let status = response.status();
    let mut body: serde_json::Value = response.json().await?;
    ensure!(status.is_success(), "the purge answered {status}: {body}");
    let erasure = format!(
        "http://{}/v1/admin/erasures/{}",
        server.addr(),
        body["erasure_id"]
    );
    while body["status"] == "running" {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let response = purge_client.get(&erasure).send().await?;
        let status = response.status();
        body = response.json().await?;
        ensure!(status.is_success(), "the erasure answered {status}: {body}");
    }
    let purge = start.elapsed();
    let count = |name: &str| body["counts"][name].as_u64().unwrap_or_default();
    let bytes_after = records.size(data_dir.path())?;
    server.stop()?;
    let measured = Measured {
        label,
        load,
        pending_at_purge,
        bytes_before,
        message_erasures,
        purge,
        erased_sessions: count("sessions"),
        erased_messages: count("messages"),
        bytes_after,
    };
    ensure!(
        measured.erased_sessions == sessions as u64,
        "the purge erased {} of {sessions} conversations: {body}",
        measured.erased_sessions
    );
    Ok(measured)
}

/// Appends one conversation per session id, `CLIENTS` at a time.
async fn append_all(
    http: &reqwest::Client,
    addr: SocketAddr,
    sessions: usize,
) -> anyhow::Result<()> {
    let next = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (http, next) = (http.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let session = next.fetch_add(1, Ordering::Relaxed);
                    if session >= sessions {
                        return anyhow::Ok(());
                    }
                    if session % 10_000 == 0 {
                        eprintln!("xtask: {session} of {sessions} conversations appended");
                    }
                    let body = Append {
                        user_id: format!("user-{}", session % USERS),
                        agent_id: "bench",
                        messages: [
                            Message {
                                role: "user",
                                content: sentence(client, session),
                            },
                            Message {
                                role: "assistant",
                                content: sentence(session, client),
                            },
                        ],
                    };
                    let url = format!("http://{addr}/v1/sessions/purge-{session}/messages");
                    let response = http.post(url).json(&body).send().await?;
                    if !response.status().is_success() {
                        let status = response.status();
                        bail!("an append answered {status}: {}", response.text().await?);
                    }
                }
            })
        })
        .collect();
    for client in clients {
        client.await??;
    }
    Ok(())
}

/// The server's embedding backlog (`memlayer_embeddings_pending` in `/metrics`); `None` if
/// the figure is missing, which only leaves it out of the report.
pub(crate) async fn pending_embeddings(http: &reqwest::Client, addr: SocketAddr) -> Option<u64> {
    let text = http
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find(|line| line.starts_with("memlayer_embeddings_pending"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn report(results: &[Measured], sessions: usize, load: [String; 2]) -> String {
    let mut out = String::new();
    let command: Vec<String> = std::env::args().skip(1).collect();
    let _ = writeln!(out, "## Purge of {sessions} conversations\n");
    let _ = writeln!(
        out,
        "Command: `cargo xtask {}`. Load average {} before / {} after. Release server on a \
         fresh data directory; {sessions} conversations of two messages (one append each, \
         {CLIENTS} clients), then {MESSAGE_ERASURES} single messages erased one after another \
         (`DELETE /v1/sessions/{{id}}/messages/0`, request to receipt), then `DELETE \
         /v1/admin/conversations/purge?older_than_days=0`, which answers once every \
         conversation is erased and the store file compacted.\n",
        command.join(" "),
        load[0],
        load[1],
    );
    let _ = writeln!(
        out,
        "| server | append s | appends/s | waiting to be embedded at purge | store before MiB | message erasure ms (median / max) | purge s | conversations/s | messages erased | store after MiB | reclaimed MiB |"
    );
    let _ = writeln!(
        out,
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for result in results {
        let erasures = &result.message_erasures;
        let millis = |d: Option<&Duration>| d.map_or(0.0, |d| d.as_secs_f64() * 1e3);
        let _ = writeln!(
            out,
            "| {} | {:.1} | {:.0} | {} | {:.1} | {:.0} / {:.0} | {:.2} | {:.0} | {} | {:.1} | {:.1} |",
            result.label,
            result.load.as_secs_f64(),
            sessions as f64 / result.load.as_secs_f64(),
            result
                .pending_at_purge
                .map_or_else(|| "?".to_owned(), |n| n.to_string()),
            mib(result.bytes_before),
            millis(erasures.get(erasures.len() / 2)),
            millis(erasures.last()),
            result.purge.as_secs_f64(),
            result.erased_sessions as f64 / result.purge.as_secs_f64(),
            result.erased_messages,
            mib(result.bytes_after),
            mib(result.bytes_before.saturating_sub(result.bytes_after)),
        );
    }
    if results.iter().any(|r| r.purge > Duration::from_secs(15)) {
        let _ = writeln!(
            out,
            "\nWith the default 30 s request timeout a purge over 15 s answers `202` with \
             the erasure's URL and goes on (this run raised `MEMLAYER_REQUEST_TIMEOUT_SECS` \
             and followed a `202` to the receipt; the time is to the receipt either way)."
        );
    }
    if let [baseline, current, ..] = results
        && baseline.label.starts_with("baseline")
    {
        let _ = writeln!(
            out,
            "\nPurge time, this build / baseline: {:.3}×.",
            current.purge.as_secs_f64() / baseline.purge.as_secs_f64()
        );
    }
    out
}
