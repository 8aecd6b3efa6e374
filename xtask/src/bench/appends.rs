//! `cargo xtask bench appends`: the HTTP benchmark of a turn's two writes and reads. It builds the
//! release server, starts it on a fresh data directory on 127.0.0.1, asks one client's long
//! session for its next context and the user's sessions for recall, drives appends from one
//! client and then from many, then reads and erases sessions while the embedder works through
//! the backlog the appends left, and prints a markdown report with enough context (command,
//! date, machine) to compare runs.
//! Every append is a durable commit on the server, so the numbers are durable appends.
//! `--baseline` runs the same scenarios against another build of the server (an older
//! commit's) first, each on its own fresh data directory, for a side-by-side comparison in
//! one run on the same machine; `--postgres` runs them once more with this build's records in
//! a database of a throwaway PostgreSQL cluster (`test-database`, from the tests package),
//! for the two backends side by side. The report ends with the store's commit modes measured in
//! process by memlayer-bench (`commit-modes`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};

use super::load::{self, Scenario, ScenarioResult, Workload};
use crate::helper::Helper;
use crate::server::{STARTUP_TIMEOUT, Server};
use crate::{cmd, metadata};

/// Run one after the other against the same server: the context client shows the latency of
/// assembling a turn of a 100-exchange session and the recall clients that of a search of the
/// user's sessions, with and without embedding the query (first, before the appends leave the
/// embedder a backlog), the single appending client the latency of one durable commit, the
/// concurrent ones how far group commit amortises the fsync; then, while the embedder works
/// through the backlog the appends left, the reading client what that background work costs a
/// request that neither writes nor embeds, and the erasing client how long an erasure takes.
const SCENARIOS: [Scenario; 7] = [
    Scenario {
        workload: Workload::Context,
        clients: 1,
    },
    Scenario {
        workload: Workload::Recall,
        clients: 1,
    },
    Scenario {
        workload: Workload::RecallRepeated,
        clients: 1,
    },
    Scenario {
        workload: Workload::Append,
        clients: 1,
    },
    Scenario {
        workload: Workload::Append,
        clients: 64,
    },
    Scenario {
        workload: Workload::ReadSession,
        clients: 1,
    },
    Scenario {
        workload: Workload::Erase,
        clients: 1,
    },
];

/// Lets connections open and the server's caches settle before anything is measured.
const WARM_UP: Duration = Duration::from_secs(1);

/// One server build's results.
struct BuildResults {
    label: String,
    results: Vec<ScenarioResult>,
}

pub(crate) fn run(
    root: &Path,
    seconds: u64,
    baseline: Option<&Path>,
    postgres: bool,
) -> anyhow::Result<()> {
    let measured = Duration::from_secs(seconds);
    cmd::cargo(root, &["build", "--release", "-p", "memlayer"])?;
    let target_dir = metadata::read(root)?.target_directory;
    let current = target_dir.join("release").join("memlayer");
    // The database (and its cluster) lives until the end of the run.
    let database = if postgres {
        Some(Helper::test_database(root, &target_dir)?)
    } else {
        None
    };
    let mut builds: Vec<(String, PathBuf, Option<&str>)> = Vec::new();
    if let Some(baseline) = baseline {
        let label = format!("baseline (`{}`)", baseline.display());
        builds.push((label, baseline.to_owned(), None));
    }
    builds.push(("this build".to_owned(), current.clone(), None));
    if let Some(database) = &database {
        let label = "this build, records in PostgreSQL (`--database-url`)".to_owned();
        builds.push((label, current, Some(database.line.as_str())));
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("could not start the client runtime")?;
    let mut measured_builds = Vec::new();
    for (label, binary, database_url) in builds {
        eprintln!("xtask: {label}");
        let results = measure(&runtime, &target_dir, &binary, database_url, measured)?;
        measured_builds.push(BuildResults { label, results });
    }
    eprintln!("xtask: commit modes of the store, in process");
    let commit_modes = super::in_process_output(root, &["commit-modes"])?;

    print_report(seconds, &measured_builds, &commit_modes)?;
    let errors: u64 = measured_builds
        .iter()
        .flat_map(|build| &build.results)
        .map(ScenarioResult::error_count)
        .sum();
    if errors > 0 {
        bail!("{errors} request(s) failed; the numbers above do not measure a healthy server");
    }
    Ok(())
}

/// Runs every scenario against `binary` serving a fresh data directory.
fn measure(
    runtime: &tokio::runtime::Runtime,
    target_dir: &Path,
    binary: &Path,
    database_url: Option<&str>,
    measured: Duration,
) -> anyhow::Result<Vec<ScenarioResult>> {
    // The server's log goes to a file: at 64 clients a per-request log line would drown the
    // report, yet a failed start must stay explainable.
    let log = target_dir.join("bench-server.log");
    let data_dir = tempfile::Builder::new()
        .prefix("memlayer-bench-")
        .tempdir()
        .context("could not create the benchmark's data directory")?;
    let env: Vec<(&str, &str)> = database_url
        .map(|url| ("MEMLAYER_DATABASE_URL", url))
        .into_iter()
        .collect();
    let server = Server::start_with(binary, data_dir.path(), &log, STARTUP_TIMEOUT, &env)?;
    eprintln!(
        "xtask: server listening on {} (log: {})",
        server.addr(),
        log.display()
    );
    let results = load::run_each(runtime, &[server.addr()], &SCENARIOS, WARM_UP, measured)?;
    server.stop()?;
    data_dir
        .close()
        .context("could not remove the benchmark's data directory")?;
    Ok(results)
}

fn print_report(seconds: u64, builds: &[BuildResults], commit_modes: &str) -> anyhow::Result<()> {
    load::print_heading("memlayer HTTP append, context and recall benchmark", "")?;
    println!(
        "- load: `append`: `POST /v1/sessions/{{id}}/messages`, one session per client; \
         `context`: `POST /v1/sessions/{{id}}/context` (combined strategy, a query) of a \
         session of {} exchanges per client; `recall`: `POST /v1/recall` (k = 10, the \
         user's sessions) with a new query each time, or one repeated (its embedding then \
         comes from the cache); `read`: `GET /v1/sessions/{{id}}` of a session of one \
         exchange, and `erase`: `DELETE /v1/sessions/{{id}}` of a session of one exchange the \
         client created just before (not timed), both after the appends; \
         {} s warm-up then {seconds} s measured per \
         scenario; server (release build) and client share the machine",
        load::CONTEXT_TURNS,
        WARM_UP.as_secs()
    );
    println!(
        "- every append is a durable (fsync'd) commit; latency counts successful requests only"
    );
    for build in builds {
        load::print_results(&build.label, &build.results);
    }
    println!();
    println!("### Store commit modes (in process, no HTTP)");
    println!();
    println!(
        "memlayer-bench `commit-modes`: appends of the first messages of the corpus's chat \
         stream (5 to 40 words), the same texts in every mode and round."
    );
    println!();
    println!("{commit_modes}");
    Ok(())
}
