//! `cargo xtask bench-recovery`: how long a data directory of a given size takes to open and
//! to serve again after a stop or crash. The store verifies every page checksum when it opens,
//! and a start rebuilds the vector and keyword indexes from the store, so both grow with the
//! data; this measures how.
//!
//! One data directory is grown through the real store to each size in turn (`--sizes-mib`):
//! conversations of long messages appended in batches, and for every message a vector stored
//! through `Store::store_embeddings`, as the embedding pipeline stores them — seeded vectors
//! around real embeddings of a few topics, since embedding a gigabyte of text with the model
//! would take hours here. At each size it times, with nothing else running on the directory:
//! `Store::open` alone (in this process), `memlayer check --data-dir` (store, model, index
//! rebuild, and a search for every stored vector), and `memlayer serve` from spawn until
//! `/readyz` answers, until the stored messages' keywords are indexed and until its vector
//! index has its HNSW graph (both done in the background after the server is ready;
//! `memlayer_index_keywords_pending` and `memlayer_index_graph_pending` in `/metrics`), first
//! without a vector snapshot (a crash) and then with the snapshot a clean stop writes. `--baseline`
//! times the starts of another build the same way, just before this build's.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use memlayer_embed::{Assets, Embedder, EmbedderOptions};
use memlayer_store::{
    Access, Append, EmbeddingModel, Metadata, NewMessage, NewSession, Role, Store,
};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::task::JoinSet;

use crate::bench::sentence;
use crate::bench_embed::load_average;
use crate::bench_memory::{TOPICS, near};
use crate::server::{Server, admin_client};
use crate::{cmd, metadata, setup};

const TENANT: &str = "default";
/// Sessions appended at once (the group commit batches them) and messages per append.
const SESSIONS_PER_ROUND: usize = 64;
const MESSAGES_PER_SESSION: usize = 50;
/// Sentences of about 20 words per message: some 5 KB, a long answer.
const SENTENCES_PER_MESSAGE: usize = 40;
/// Messages embedded per `store_embeddings` call.
const EMBED_BATCH: usize = 2_000;
/// A start that rebuilds the index of a large store takes minutes; this bounds a broken one.
const START_TIMEOUT: Duration = Duration::from_secs(3_600);
const SEED: u64 = 8;

/// Figures at one size.
struct Measured {
    file_bytes: u64,
    messages: usize,
    store_open: Duration,
    check: Duration,
    check_verdict: String,
    /// Per build measured (the baseline first): its name, a start without the snapshot and
    /// one with it.
    starts: Vec<(String, Start, Start)>,
}

/// One start, timed from spawn.
struct Start {
    listening: Duration,
    ready: Duration,
    /// Until keyword recall covers every stored message.
    keywords: Duration,
    /// Until the vector index searches through its graph.
    graph: Duration,
}

/// What has been written so far; the next size continues from it.
struct Filler {
    rng: StdRng,
    sessions: usize,
    messages: usize,
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
    let assets = Assets::in_dir(setup::run(root)?);
    let embedder = Embedder::open(&assets, EmbedderOptions::default())?;
    let identity = embedder.identity().clone();
    let centres = embedder.embed_blocking(TENANT, &TOPICS);
    embedder.shutdown();
    let centres = centres?;
    let model = EmbeddingModel {
        name: identity.name,
        sha256: identity.sha256,
        dimension: u32::try_from(identity.dimension)?,
    };

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("could not start the runtime")?;
    let data_dir = tempfile::Builder::new()
        .prefix("memlayer-bench-recovery-")
        .tempdir_in(&target_dir)
        .context("could not create the benchmark's data directory")?;
    let store_path = data_dir.path().join("memlayer.redb");
    let load_before = load_average()?;
    let mut filler = Filler {
        rng: StdRng::seed_from_u64(SEED),
        sessions: 0,
        messages: 0,
    };
    let mut results = Vec::new();
    for &mib in sizes_mib {
        eprintln!("xtask: growing the store to {mib} MiB");
        runtime.block_on(fill(
            &store_path,
            &model,
            &centres,
            mib * 1024 * 1024,
            &mut filler,
        ))?;
        let file_bytes = std::fs::metadata(&store_path)?.len();
        // A clean stop leaves a snapshot; the first measured start must rebuild from the
        // store, as after a crash.
        let _ = std::fs::remove_file(data_dir.path().join("vectors.idx"));

        let start = Instant::now();
        Store::open(&store_path)?.shutdown();
        let store_open = start.elapsed();

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
            starts.push((name.clone(), no_snapshot, with_snapshot));
        }
        results.push(Measured {
            file_bytes,
            messages: filler.messages,
            store_open,
            check,
            check_verdict,
            starts,
        });
    }
    let load_after = load_average()?;
    println!("{}", report(&results, [load_before, load_after]));
    Ok(())
}

/// Appends and embeds conversations until the store file holds `target` bytes.
async fn fill(
    path: &Path,
    model: &EmbeddingModel,
    centres: &[Vec<f32>],
    target: u64,
    filler: &mut Filler,
) -> anyhow::Result<()> {
    let store = Store::open(path)?;
    let result = async {
        while std::fs::metadata(path)?.len() < target {
            let mut appends = JoinSet::new();
            for _ in 0..SESSIONS_PER_ROUND {
                let session = filler.sessions;
                filler.sessions += 1;
                let messages: Vec<NewMessage> = (0..MESSAGES_PER_SESSION)
                    .map(|i| {
                        let content = (0..SENTENCES_PER_MESSAGE)
                            .map(|s| sentence(session, i * SENTENCES_PER_MESSAGE + s))
                            .collect::<Vec<_>>()
                            .join(" ");
                        NewMessage {
                            role: if i % 2 == 0 {
                                Role::User
                            } else {
                                Role::Assistant
                            },
                            // About four characters a token, as cl100k_base gives English.
                            token_count: u32::try_from(content.len() / 4).unwrap_or(u32::MAX),
                            content,
                            timestamp: None,
                            metadata: Metadata::new(),
                        }
                    })
                    .collect();
                filler.messages += messages.len();
                let append = Append {
                    messages,
                    create: Some(NewSession {
                        user_id: format!("user-{}", session % 100),
                        agent_id: "agent".into(),
                        flow_id: None,
                        metadata: Metadata::new(),
                    }),
                    idempotency_key: None,
                };
                let store = store.clone();
                appends.spawn(async move {
                    store
                        .sessions()
                        .append(
                            &Access::tenant_wide(TENANT),
                            &format!("recovery-{session}"),
                            append,
                        )
                        .await
                });
            }
            while let Some(appended) = appends.join_next().await {
                appended.context("an append task panicked")??;
            }
            loop {
                let pending = store.feed().pending_embeddings(EMBED_BATCH)?;
                if pending.is_empty() {
                    break;
                }
                let done = pending.iter().map(|entry| entry.seq).collect();
                let vectors = pending
                    .iter()
                    .flat_map(|entry| &entry.messages)
                    .map(|(key, _)| {
                        let topic = (key.index() as usize) % centres.len();
                        (*key, near(&mut filler.rng, &centres[topic]))
                    })
                    .collect();
                store
                    .feed()
                    .store_embeddings(model.clone(), done, vectors)
                    .await?;
            }
        }
        anyhow::Ok(())
    }
    .await;
    store.shutdown();
    result
}

/// Starts the server, waits until it is ready and then until its vector graph is built, and
/// stops it cleanly.
async fn timed_start(binary: &Path, data_dir: &Path, log: &Path) -> anyhow::Result<Start> {
    let start = Instant::now();
    let server = Server::start_with(binary, data_dir, log, START_TIMEOUT, &[])?;
    let listening = start.elapsed();
    let http = admin_client(Duration::from_secs(10))?;
    let addr = server.addr();
    wait_for(&http, addr, "readyz", |response| async move {
        response.status().is_success()
    })
    .await?;
    let ready = start.elapsed();
    let keywords = done_after(&http, addr, start, "memlayer_index_keywords_pending").await?;
    let graph = done_after(&http, addr, start, "memlayer_index_graph_pending").await?;
    server.stop()?;
    Ok(Start {
        listening,
        ready,
        keywords,
        graph,
    })
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
async fn wait_for<F, Fut>(
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
            "{:.1} / {:.1} / {:.1} / {:.1}",
            secs(self.listening),
            secs(self.ready),
            secs(self.keywords),
            secs(self.graph)
        )
    }
}

fn report(results: &[Measured], load: [String; 2]) -> String {
    let mut out = String::new();
    let command: Vec<String> = std::env::args().skip(1).collect();
    let _ = writeln!(out, "## Recovery time by store size\n");
    let _ = writeln!(
        out,
        "Command: `cargo xtask {}`. Load average {} before / {} after. One data directory \
         grown to each size through the real store: conversations of {MESSAGES_PER_SESSION} \
         messages of about {} KB each, every message with a stored 384-dimension vector. \
         The file is in the page cache (it was just written): a cold disk adds its read \
         time. Starts are timed from spawn; the server listens once the store is open and \
         the indexes are loaded (vectors, every message's session and filter fields); the \
         stored messages' keywords and the HNSW graph of the message vectors are built after \
         that in the background (keyword recall misses older messages and vector searches \
         scan every vector until then). Builds older than that work did it before they \
         were ready.\n",
        command.join(" "),
        load[0],
        load[1],
        SENTENCES_PER_MESSAGE * 125 / 1000,
    );
    let _ = writeln!(
        out,
        "| store file MiB | messages (= vectors) | `Store::open` s | `memlayer check` s | check verdict | server | start, no snapshot: listening / ready / keywords / graph s | start with snapshot: listening / ready / keywords / graph s |"
    );
    let _ = writeln!(out, "| ---: | ---: | ---: | ---: | --- | --- | --- | --- |");
    for result in results {
        for (name, no_snapshot, with_snapshot) in &result.starts {
            let _ = writeln!(
                out,
                "| {:.0} | {} | {:.2} | {:.1} | {} | {name} | {} | {} |",
                result.file_bytes as f64 / (1024.0 * 1024.0),
                result.messages,
                secs(result.store_open),
                secs(result.check),
                result.check_verdict,
                no_snapshot.row(),
                with_snapshot.row(),
            );
        }
    }
    out
}
