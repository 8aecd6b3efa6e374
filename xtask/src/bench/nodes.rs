//! `cargo xtask bench nodes`: durable HTTP appends through one, two, … release servers
//! sharing one database of a throwaway PostgreSQL cluster, the clients spread over the nodes
//! as a load balancer would. Every node, the database and the clients share this machine's
//! cores, so the figures say what several nodes cost here, not what they gain on machines
//! of their own.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};

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

    print_report(seconds, &measured_counts)?;
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

fn print_report(seconds: u64, counts: &[(usize, Vec<ScenarioResult>)]) -> anyhow::Result<()> {
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
    Ok(())
}
