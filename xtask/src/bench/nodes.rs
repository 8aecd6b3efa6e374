//! `cargo xtask bench nodes`: durable HTTP appends through one, two, … release servers
//! sharing one database of a throwaway PostgreSQL cluster, the clients spread over the nodes
//! as a load balancer would; and with two nodes or more, how long an append acknowledged by
//! one node takes to be found by a recall on another (the feed lag a client sees). Every
//! node, the database and the clients share this machine's cores, so the figures say what
//! several nodes cost here, not what they gain on machines of their own.

use std::net::SocketAddr;
use std::path::Path;
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

/// Appends whose way from one node to another's recall is timed, at each count of two nodes
/// or more.
const LAG_SAMPLES: usize = 40;

/// Longest one append may take to be found on the other node before the run fails.
const LAG_LIMIT: Duration = Duration::from_secs(30);

pub(crate) fn run(root: &Path, seconds: u64, max_nodes: usize) -> anyhow::Result<()> {
    if max_nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    let measured = Duration::from_secs(seconds);
    cmd::cargo(root, &["build", "--release", "-p", "memlayer"])?;
    let target_dir = metadata::read(root)?.target_directory;
    let binary = target_dir.join("release").join("memlayer");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("could not start the client runtime")?;

    let mut measured_counts: Vec<(usize, Vec<ScenarioResult>)> = Vec::new();
    let mut lags: Vec<(usize, Vec<Duration>)> = Vec::new();
    for nodes in 1..=max_nodes {
        // A fresh database (of a fresh cluster) for each count: the embedding backlog the
        // previous count's appends left must not load the next count's nodes.
        let database = Helper::test_database(root, &target_dir)?;
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
                Server::start_with(&binary, dir.path(), &log, STARTUP_TIMEOUT, &env)
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let addrs: Vec<_> = servers.iter().map(Server::addr).collect();
        if let [first, second, ..] = addrs[..] {
            eprintln!("xtask: {nodes} node(s), feed lag over {LAG_SAMPLES} appends");
            lags.push((nodes, runtime.block_on(feed_lag(first, second))?));
        }
        let mut results = Vec::new();
        for scenario in SCENARIOS {
            eprintln!(
                "xtask: {nodes} node(s), {} by {} client(s), {} s warm-up then {} s measured",
                scenario.workload.name(),
                scenario.clients,
                WARM_UP.as_secs(),
                measured.as_secs()
            );
            results.push(runtime.block_on(load::run(&addrs, scenario, WARM_UP, measured))?);
        }
        for server in servers {
            server.stop()?;
        }
        measured_counts.push((nodes, results));
    }

    print_report(seconds, &measured_counts, &lags)?;
    let errors: u64 = measured_counts
        .iter()
        .flat_map(|(_, results)| results)
        .map(ScenarioResult::error_count)
        .sum();
    if errors > 0 {
        bail!("{errors} request(s) failed; the numbers above do not measure healthy nodes");
    }
    Ok(())
}

/// Appends [`LAG_SAMPLES`] messages one after the other through the node at `from`, each
/// with a word of its own, and after each acknowledgement asks the node at `to` to recall
/// that word until a hit holds it: the time from the acknowledgement to that answer. A
/// recall waits (up to its read-your-writes bound) for what the database had when it
/// started, so one request mostly suffices.
async fn feed_lag(from: SocketAddr, to: SocketAddr) -> anyhow::Result<Vec<Duration>> {
    let http = crate::server::admin_client(LAG_LIMIT)?;
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
        loop {
            let answer: Value = http
                .post(format!("http://{to}/v1/recall"))
                .json(&json!({ "user_id": "bench", "query": word, "k": 1 }))
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            let found = answer["hits"][0]["content"]
                .as_str()
                .is_some_and(|content| content.contains(&word));
            if found {
                break;
            }
            anyhow::ensure!(
                acknowledged.elapsed() < LAG_LIMIT,
                "append {sample} not found on the other node after {LAG_LIMIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        lags.push(acknowledged.elapsed());
    }
    lags.sort_unstable();
    Ok(lags)
}

fn print_report(
    seconds: u64,
    counts: &[(usize, Vec<ScenarioResult>)],
    lags: &[(usize, Vec<Duration>)],
) -> anyhow::Result<()> {
    load::print_heading(
        "memlayer nodes on one PostgreSQL database: appends",
        "; the nodes (release builds), PostgreSQL and the clients all share them",
    )?;
    println!(
        "- load: `POST /v1/sessions/{{id}}/messages`, one session per client, client n \
         through node n mod N; {} s warm-up then {seconds} s measured per scenario; every \
         append is committed in the database before its answer; a fresh database for each \
         node count; every node embeds appended messages in the background meanwhile",
        WARM_UP.as_secs()
    );
    for (nodes, results) in counts {
        load::print_results(&format!("{nodes} node(s)"), results);
    }
    if !lags.is_empty() {
        println!();
        println!("### Feed lag: acknowledged on node 0, found by a recall on node 1");
        println!();
        println!(
            "Measured before the loads above, on idle nodes: {LAG_SAMPLES} appends one after \
             the other, each with a word of its own, and after each acknowledgement recalls of \
             that word on the other node until a hit holds it."
        );
        println!();
        println!("| nodes | samples | p50 ms | p95 ms | max ms |");
        println!("| ---: | ---: | ---: | ---: | ---: |");
        for (nodes, lag) in lags {
            let ms = |p: f64| {
                load::percentile(lag, p).map_or_else(
                    || "-".to_owned(),
                    |d| format!("{:.1}", d.as_secs_f64() * 1e3),
                )
            };
            println!(
                "| {nodes} | {} | {} | {} | {} |",
                lag.len(),
                ms(50.0),
                ms(95.0),
                ms(100.0)
            );
        }
    }
    Ok(())
}
