//! `cargo xtask bench nodes`: durable HTTP appends through one, two, … release servers
//! sharing one database of a throwaway PostgreSQL cluster, the clients spread over the nodes
//! as a load balancer would; and with two nodes or more, how long an append acknowledged by
//! one node takes to be found by a recall on another (the feed lag a client sees); and at
//! every count, how long the erasure of a session takes to its receipt (which waits for
//! every live node to have dropped it). Every
//! node, the database and the clients share this machine's cores, so the figures say what
//! several nodes cost here, not what they gain on machines of their own.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::load::{self, Scenario, ScenarioResult, Workload};
use crate::helper::Helper;
use crate::server::{STARTUP_TIMEOUT, Server};
use crate::{cmd, metadata};

/// Measured at each node count: one client (the latency of a durable append through a node)
/// and 64 (the throughput the nodes reach together).
const SCENARIOS: [Scenario; 2] = [
    Scenario {
        workload: Workload::Append,
        clients: 1,
    },
    Scenario {
        workload: Workload::Append,
        clients: 64,
    },
];

/// Lets connections open before anything is measured.
const WARM_UP: Duration = Duration::from_secs(1);

/// A stuck request fails instead of hanging the run.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Appends whose way from one node to another's recall is timed, at each count of two nodes
/// or more.
const LAG_SAMPLES: usize = 40;

/// Longest one append may take to be found on the other node: beyond, it counts as not
/// found (a build whose nodes do not follow each other never finds most).
const LAG_LIMIT: Duration = Duration::from_secs(5);

/// Sessions erased one after the other at each node count, each timed from its `DELETE` to
/// the answer (the receipt).
const ERASURE_SAMPLES: usize = 10;

/// What one build measured at one node count.
struct Count {
    nodes: usize,
    results: Vec<ScenarioResult>,
    /// With two nodes or more: the feed lag of each sample, `None` for one not found within
    /// [`LAG_LIMIT`].
    lags: Vec<Option<Duration>>,
    /// How long each erasure took to its receipt.
    erasures: Vec<Duration>,
}

pub(crate) fn run(
    root: &Path,
    seconds: u64,
    max_nodes: usize,
    baseline: Option<&Path>,
) -> anyhow::Result<()> {
    if max_nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    let measured = Duration::from_secs(seconds);
    cmd::cargo(root, &["build", "--release", "-p", "memlayer"])?;
    let target_dir = metadata::read(root)?.target_directory;
    let mut builds: Vec<(String, PathBuf)> = Vec::new();
    if let Some(baseline) = baseline {
        builds.push((
            format!("baseline (`{}`)", baseline.display()),
            baseline.to_owned(),
        ));
    }
    builds.push((
        "this build".to_owned(),
        target_dir.join("release").join("memlayer"),
    ));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("could not start the client runtime")?;

    let mut measured_builds: Vec<(String, Vec<Count>)> = Vec::new();
    for (label, binary) in builds {
        let mut counts = Vec::new();
        for nodes in 1..=max_nodes {
            eprintln!("xtask: {label}, {nodes} node(s)");
            counts.push(measure(
                &runtime,
                root,
                &target_dir,
                &binary,
                nodes,
                measured,
            )?);
        }
        measured_builds.push((label, counts));
    }

    print_report(seconds, &measured_builds)?;
    let errors: u64 = measured_builds
        .iter()
        .flat_map(|(_, counts)| counts)
        .flat_map(|count| &count.results)
        .map(ScenarioResult::error_count)
        .sum();
    if errors > 0 {
        bail!("{errors} request(s) failed; the numbers above do not measure healthy nodes");
    }
    Ok(())
}

/// Starts `nodes` servers of `binary` on a fresh database (of a fresh cluster: the
/// embedding backlog a previous count's appends left must not load the next count's nodes),
/// measures the feed lag between two of them, then each scenario.
fn measure(
    runtime: &tokio::runtime::Runtime,
    root: &Path,
    target_dir: &Path,
    binary: &Path,
    nodes: usize,
    measured: Duration,
) -> anyhow::Result<Count> {
    let database = Helper::test_database(root, target_dir)?;
    let env = [("MEMLAYER_DATABASE_URL", database.line.as_str())];
    let dirs = (0..nodes)
        .map(|_| {
            tempfile::Builder::new()
                .prefix("memlayer-bench-node-")
                .tempdir()
                .context("could not create a node's data directory")
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let servers = dirs
        .iter()
        .enumerate()
        .map(|(node, dir)| {
            let log = target_dir.join(format!("bench-node-{node}.log"));
            Server::start_with(binary, dir.path(), &log, STARTUP_TIMEOUT, &env)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let addrs: Vec<_> = servers.iter().map(Server::addr).collect();
    let lags = match addrs[..] {
        [first, second, ..] => {
            eprintln!("xtask: feed lag over {LAG_SAMPLES} appends");
            runtime.block_on(feed_lag(first, second))?
        }
        _ => Vec::new(),
    };
    eprintln!("xtask: {ERASURE_SAMPLES} erasures to their receipts");
    let erasures = runtime.block_on(erasure_receipts(&addrs))?;
    let results = load::run_each(runtime, &addrs, &SCENARIOS, WARM_UP, measured)?;
    for server in servers {
        server.stop()?;
    }
    Ok(Count {
        nodes,
        results,
        lags,
        erasures,
    })
}

/// Appends [`LAG_SAMPLES`] messages one after the other through the node at `from`, each
/// with a word of its own, and after each acknowledgement asks the node at `to` to recall
/// that word until one of the top 10 hits holds it: the time from the acknowledgement to
/// that answer. A recall waits (up to its read-your-writes bound) for what the database had
/// when it started, so one request mostly suffices.
async fn feed_lag(from: SocketAddr, to: SocketAddr) -> anyhow::Result<Vec<Option<Duration>>> {
    let http = crate::server::admin_client(REQUEST_TIMEOUT)?;
    let mut lags = Vec::with_capacity(LAG_SAMPLES);
    for sample in 0..LAG_SAMPLES {
        let word = format!("lagprobe{sample}x");
        let response = http
            .post(format!("http://{from}/v1/sessions/bench-lag/messages"))
            .json(&json!({
                "user_id": "bench",
                "agent_id": "bench",
                "role": "user",
                "content": format!("{} {word}", load::sentence(0, sample)),
            }))
            .send()
            .await?;
        anyhow::ensure!(
            response.status().is_success(),
            "append answered {}",
            response.status()
        );
        let acknowledged = Instant::now();
        let found = found_within(&http, to, &word, LAG_LIMIT).await?;
        lags.push(found.then(|| acknowledged.elapsed()));
    }
    Ok(lags)
}

/// Whether a recall of `word` on the node at `to` finds it among its top 10 hits within
/// `limit`, asking again every 10 ms.
async fn found_within(
    http: &reqwest::Client,
    to: SocketAddr,
    word: &str,
    limit: Duration,
) -> anyhow::Result<bool> {
    let started = Instant::now();
    while started.elapsed() < limit {
        let answer: Value = http
            .post(format!("http://{to}/v1/recall"))
            .json(&json!({ "user_id": "bench", "query": word, "k": 10 }))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        // Among the top 10, not first: a neighbouring turn of similar meaning can outrank
        // the only message holding the word.
        let found = answer["hits"].as_array().is_some_and(|hits| {
            hits.iter().any(|hit| {
                hit["content"]
                    .as_str()
                    .is_some_and(|content| content.contains(word))
            })
        });
        if found {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(false)
}

/// [`ERASURE_SAMPLES`] times: appends a session of four turns through the first node, waits
/// until the last node recalls it (so every node holds it), and erases it through the first
/// node: the time from the `DELETE` to its answer, which comes with the receipt.
async fn erasure_receipts(addrs: &[SocketAddr]) -> anyhow::Result<Vec<Duration>> {
    let (Some(&first), Some(&last)) = (addrs.first(), addrs.last()) else {
        bail!("no node to erase through");
    };
    let http = crate::server::admin_client(REQUEST_TIMEOUT)?;
    let mut took = Vec::with_capacity(ERASURE_SAMPLES);
    for sample in 0..ERASURE_SAMPLES {
        let session = format!("bench-erase-{sample}");
        let word = format!("eraseprobe{sample}x");
        let messages: Vec<Value> = (0..4)
            .map(|turn| {
                json!({
                    "role": if turn % 2 == 0 { "user" } else { "assistant" },
                    "content": format!("{} {word}", load::sentence(1, sample * 4 + turn)),
                })
            })
            .collect();
        http.post(format!("http://{first}/v1/sessions/{session}/messages"))
            .json(&json!({ "user_id": "bench", "agent_id": "bench", "messages": messages }))
            .send()
            .await?
            .error_for_status()?;
        anyhow::ensure!(
            found_within(&http, last, &word, LAG_LIMIT).await?,
            "the last node never recalled session {session}"
        );
        let started = Instant::now();
        http.delete(format!("http://{first}/v1/sessions/{session}"))
            .send()
            .await?
            .error_for_status()?;
        took.push(started.elapsed());
    }
    Ok(took)
}

fn print_report(seconds: u64, builds: &[(String, Vec<Count>)]) -> anyhow::Result<()> {
    load::print_heading(
        "memlayer nodes on one PostgreSQL database: appends and feed lag",
        "; the nodes (release builds), PostgreSQL and the clients all share them",
    )?;
    println!(
        "- load: `POST /v1/sessions/{{id}}/messages`, one session per client, client n \
         through node n mod N; {} s warm-up then {seconds} s measured per scenario; every \
         append is committed in the database before its answer; a fresh database for each \
         node count; the nodes embed appended messages in the background meanwhile",
        WARM_UP.as_secs()
    );
    println!(
        "- feed lag (two nodes or more, measured first, on idle nodes): {LAG_SAMPLES} appends \
         one after the other through node 0, each with a word of its own; after each \
         acknowledgement, recalls of that word on node 1 until one of the top 10 holds it \
         (at most {} s: beyond, not found)",
        LAG_LIMIT.as_secs()
    );
    println!(
        "- erasure to receipt (every node count, after the feed lag, on idle nodes): \
         {ERASURE_SAMPLES} sessions of four turns, each appended through node 0 and recalled \
         on the last node first; the time from its `DELETE` through node 0 to the answer, \
         which comes with the receipt"
    );
    for (label, counts) in builds {
        for count in counts {
            load::print_results(&format!("{label}: {} node(s)", count.nodes), &count.results);
        }
        println!();
        println!("### {label}: erasure to receipt, through node 0");
        println!();
        println!("| nodes | samples | p50 ms | p95 ms | max ms |");
        println!("| ---: | ---: | ---: | ---: | ---: |");
        for count in counts {
            let mut took = count.erasures.clone();
            took.sort_unstable();
            println!(
                "| {} | {} | {} | {} | {} |",
                count.nodes,
                took.len(),
                milliseconds(&took, 50.0),
                milliseconds(&took, 95.0),
                milliseconds(&took, 100.0)
            );
        }
        let lagged: Vec<&Count> = counts.iter().filter(|c| !c.lags.is_empty()).collect();
        if lagged.is_empty() {
            continue;
        }
        println!();
        println!("### {label}: feed lag, acknowledged on node 0 to found on node 1");
        println!();
        println!("| nodes | samples | not found | p50 ms | p95 ms | max ms |");
        println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
        for count in lagged {
            let mut found: Vec<Duration> = count.lags.iter().flatten().copied().collect();
            found.sort_unstable();
            println!(
                "| {} | {} | {} | {} | {} | {} |",
                count.nodes,
                count.lags.len(),
                count.lags.len() - found.len(),
                milliseconds(&found, 50.0),
                milliseconds(&found, 95.0),
                milliseconds(&found, 100.0)
            );
        }
    }
    Ok(())
}

/// The `p`th percentile of `sorted` in milliseconds for a table, `-` for none.
fn milliseconds(sorted: &[Duration], p: f64) -> String {
    load::percentile(sorted, p).map_or_else(
        || "-".to_owned(),
        |d| format!("{:.1}", d.as_secs_f64() * 1e3),
    )
}
