//! `cargo xtask crash`: the proof that memlayer loses nothing when its process dies. The real
//! server runs on a real data directory; clients append (to their own sessions and to
//! sessions they share), remember and forget memories, read contexts, erase messages, delete
//! sessions and purge a tenant, each recording what was acknowledged. The server is killed
//! with SIGKILL at random moments — some kills land during start-up recovery — and after
//! every restart the clients settle the operation they had in flight (an append is retried
//! with its idempotency key) and check that:
//!
//! - every acknowledged message is served exactly once, whole, at its acknowledged index,
//!   and nothing unacknowledged is; each client's messages in a shared session keep its order;
//! - acknowledged erasures stay erased, interrupted ones are all or nothing (a purge never
//!   leaves half its sessions), and memories are exactly the acknowledged ones;
//! - every few kills, with the server down: `memlayer check` finds the vector index a start
//!   would load equal to the stored vectors (each among its own ten nearest), and no byte of
//!   any erased text is left in the store file or the index snapshot.
//!
//! The server saves its vector index snapshot (vectors and graph) every second while the
//! index changes, and every few kills waits for a save to be under way (its temporary file
//! to appear) and kills then: the next start must remove what the save left and serve from
//! the previous snapshot or the store, never from a half-written one.
//!
//! With `--postgres` the records are in a database of a throwaway PostgreSQL cluster, and the
//! kills rotate between the server alone, the database and the server together, and the
//! database alone (`pg_ctl stop -m immediate`, as a power cut: no shutdown checkpoint) while
//! the server keeps running and must recover by itself. The same checks hold, except
//! `memlayer check`, which reads the store file; the byte scans cover every file of the
//! cluster, where no planted text may be in plain at all (content is stored sealed).

mod client;
mod verify;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::helper::Helper;
use crate::server::{ADMIN_KEY, STARTUP_TIMEOUT, Server};
use crate::{cmd, metadata};
use client::{ClientState, Http, TOKEN_PREFIX};

/// The tenant the purging client owns; the other clients' tenant is never purged.
const PURGE_TENANT: &str = "crash-purge";
/// Every this many kills, the data files are checked with the server down.
const FILE_CHECK_EVERY: usize = 5;
/// Every this many kills, the next start is killed too, part-way through.
const START_KILL_EVERY: usize = 4;
/// Every this many kills, the server is killed while it writes its vector index snapshot.
const SNAPSHOT_KILL_EVERY: usize = 3;
/// Longest an aimed kill waits for a snapshot save before it kills anyway.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(5);
/// The server's least time between two snapshots: much shorter than its default, so kills
/// land in snapshot writes.
const SNAPSHOT_INTERVAL_SECS: &str = "1";
/// The snapshot file and the temporary file a save writes before renaming it.
const SNAPSHOT_FILE: &str = "vectors.idx";
const SNAPSHOT_TEMP: &str = "vectors.idx.tmp";

/// How a crash run goes.
pub(crate) struct Options {
    pub(crate) kills: usize,
    pub(crate) clients: usize,
    pub(crate) seed: u64,
    pub(crate) release: bool,
    pub(crate) postgres: bool,
}

/// Where the server keeps its records.
enum Records {
    /// The store file in the data directory.
    File,
    /// A database of a throwaway PostgreSQL cluster (the `test-database` helper).
    Postgres(Helper),
}

impl Records {
    /// What the server's environment needs for these records and this test.
    fn env(&self) -> Vec<(&str, &str)> {
        let mut env = vec![("MEMLAYER_SNAPSHOT_INTERVAL_SECS", SNAPSHOT_INTERVAL_SECS)];
        if let Self::Postgres(cluster) = self {
            env.push(("MEMLAYER_DATABASE_URL", cluster.line.as_str()));
        }
        env
    }

    /// Asks the cluster to `crash` or `start`.
    fn cluster(&mut self, request: &str) -> anyhow::Result<()> {
        let Self::Postgres(cluster) = self else {
            bail!("no database to {request}");
        };
        let answer = cluster.ask(request)?;
        if answer != "ok" {
            bail!("the test cluster's {request}: {answer}");
        }
        Ok(())
    }
}

/// What a kill stops.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fault {
    Server,
    /// The database at once, then the server, which restarts only after the database.
    Both,
    /// The database alone: the server keeps running and must recover when it is back.
    Database,
}

impl Fault {
    fn describe(self) -> &'static str {
        match self {
            Self::Server => "the server",
            Self::Both => "the database and the server",
            Self::Database => "the database",
        }
    }

    fn of(kill: usize, records: &Records) -> Self {
        match (records, kill % 3) {
            (Records::File, _) | (Records::Postgres(_), 0) => Self::Server,
            (Records::Postgres(_), 1) => Self::Both,
            (Records::Postgres(_), _) => Self::Database,
        }
    }
}

/// Figures of a run.
#[derive(Default)]
struct Tally {
    acknowledged: u64,
    uncertain: u64,
    start_kills: usize,
    /// Kills aimed at a snapshot save, and how many of them found one under way.
    snapshot_kills: usize,
    snapshot_kills_landed: usize,
    file_checks: usize,
    /// Planted texts the file checks' byte scans found (live ones: erased ones fail the run).
    tokens_scanned: usize,
    /// From spawning the server (or, when only the database was stopped, from its restart)
    /// to the first successful `/readyz`, after each crash.
    recoveries: Vec<Duration>,
}

pub(crate) fn run(root: &Path, options: &Options) -> anyhow::Result<()> {
    let mut build = vec!["build", "-p", "memlayer"];
    let profile = if options.release {
        build.push("--release");
        "release"
    } else {
        "debug"
    };
    cmd::cargo(root, &build)?;
    let target = metadata::read(root)?.target_directory;
    let binary = target.join(profile).join("memlayer");
    let mut records = if options.postgres {
        Records::Postgres(Helper::test_database(root, &target)?)
    } else {
        Records::File
    };
    let logs = target.join("crash-logs");
    // Logs of an earlier run would be mistaken for this one's.
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs)?;
    let data = tempfile::Builder::new()
        .prefix("memlayer-crash-")
        .tempdir()
        .context("could not create the data directory")?;
    let outcome = run_in(&binary, data.path(), &mut records, &logs, options);
    if outcome.is_err() {
        // The failing store is the evidence: keep it for `memlayer check` and a byte search.
        let kept = data.keep();
        eprintln!("xtask: the failed run's data is kept in {}", kept.display());
    }
    outcome
}

fn run_in(
    binary: &Path,
    data: &Path,
    records: &mut Records,
    logs: &Path,
    options: &Options,
) -> anyhow::Result<()> {
    let purge_key = create_purge_key(binary, data, records)?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut rng = StdRng::seed_from_u64(options.seed);
    let mut states: Vec<ClientState> = (0..options.clients)
        .map(|id| ClientState::new(id, false, ADMIN_KEY.to_owned(), options.seed))
        .chain([ClientState::new(
            options.clients,
            true,
            purge_key.clone(),
            options.seed,
        )])
        .collect();
    let mut tally = Tally::default();
    let log = |n: usize, what: &str| logs.join(format!("{n:03}-{what}.log"));
    eprintln!(
        "xtask: crash test{}, {} kills, {} clients + 1 purging, seed {}, data in {}, logs in {}",
        if options.postgres {
            " on PostgreSQL"
        } else {
            ""
        },
        options.kills,
        options.clients,
        options.seed,
        data.display(),
        logs.display()
    );

    let start = |records: &Records, log: &Path| {
        Server::start_with(binary, data, log, STARTUP_TIMEOUT, &records.env())
    };
    let mut server = start(records, &log(0, "start"))?;
    for kill in 1..=options.kills {
        let mut handles = Vec::new();
        for state in states.drain(..) {
            handles.push(runtime.spawn(client::run(Http::new(server.addr())?, state)));
        }
        std::thread::sleep(Duration::from_millis(rng.random_range(300..1_500)));
        let fault = Fault::of(kill, records);
        if fault != Fault::Database && kill % SNAPSHOT_KILL_EVERY == 0 {
            tally.snapshot_kills += 1;
            if wait_for(&data.join(SNAPSHOT_TEMP), SNAPSHOT_WAIT) {
                tally.snapshot_kills_landed += 1;
            }
        }
        if fault != Fault::Server {
            records.cluster("crash")?;
        }
        if fault != Fault::Database {
            server.kill()?;
        }
        // With the database down the clients' requests fail, and each stops at its first
        // failure, as it does when the server dies.
        for handle in handles {
            states.push(runtime.block_on(handle).context("a client panicked")?);
        }
        tally.uncertain += states.iter().filter(|s| s.uncertain.is_some()).count() as u64;
        if fault != Fault::Server {
            records.cluster("start")?;
        }

        if kill % FILE_CHECK_EVERY == 0 {
            let check = log(kill, "check");
            tally.tokens_scanned += check_files(binary, data, records, &states, &check)?;
            tally.file_checks += 1;
        }
        if fault != Fault::Database && kill % START_KILL_EVERY == 0 {
            let after = Duration::from_millis(rng.random_range(0..1_500));
            let killed = log(kill, "start-killed");
            Server::kill_during_start(binary, data, &killed, after, &records.env())?;
            tally.start_kills += 1;
        }
        let started = Instant::now();
        if fault != Fault::Database {
            server = start(records, &log(kill, "start"))?;
        }
        let http = Http::new(server.addr())?;
        runtime.block_on(wait_ready(&http))?;
        tally.recoveries.push(started.elapsed());

        let mut violations = Vec::new();
        for state in &mut states {
            runtime.block_on(verify::settle(&http, state));
            violations.append(&mut state.violations);
        }
        violations.extend(runtime.block_on(verify::check(&http, &states)));
        if !violations.is_empty() {
            for violation in &violations {
                eprintln!("violation: {violation}");
            }
            bail!(
                "{} violation(s) after kill {kill} (seed {}); server logs in {}",
                violations.len(),
                options.seed,
                logs.display()
            );
        }
        tally.acknowledged = states.iter().map(|s| s.acknowledged).sum();
        eprintln!(
            "xtask: kill {kill}/{} ({}): {} operations acknowledged so far, recovered in \
             {:.2} s, no violation",
            options.kills,
            fault.describe(),
            tally.acknowledged,
            tally.recoveries.last().map_or(0.0, Duration::as_secs_f64)
        );
    }
    server.stop()?;
    let check = log(options.kills + 1, "check");
    tally.tokens_scanned += check_files(binary, data, records, &states, &check)?;
    tally.file_checks += 1;
    report(options, &tally, &states, data_size(data, records)?);
    Ok(())
}

/// Whether `path` appeared within `limit`, polled every millisecond: a snapshot save of
/// this test's few thousand vectors takes some milliseconds.
fn wait_for(path: &Path, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

/// A tenant_admin key of the purging client's tenant, made as an operator would.
fn create_purge_key(binary: &Path, data: &Path, records: &Records) -> anyhow::Result<String> {
    let mut command = Command::new(binary);
    command.envs(records.env());
    command
        .args([
            "keys",
            "create",
            "--tenant",
            PURGE_TENANT,
            "--role",
            "tenant_admin",
        ])
        .arg("--data-dir")
        .arg(data);
    Ok(cmd::output(command)?.trim().to_owned())
}

/// Polls `/readyz` until the server says it is ready: it answers only after it has finished
/// the erasures the crash interrupted.
async fn wait_ready(http: &Http) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let client::Answer::Done(..) = http
            .send(ADMIN_KEY, reqwest::Method::GET, "/readyz", None, None)
            .await
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the server was not ready within 120 s of its start");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `memlayer check` on the data directory (with the server down), and a byte scan of the data
/// files for every erased text's token. Returns how many planted tokens the scan found (all
/// of live texts), which shows that it does find text. On PostgreSQL, where `check` does not
/// apply, the scan also reads every file of the cluster, and any planted text found is in
/// plain where content must be sealed.
fn check_files(
    binary: &Path,
    data: &Path,
    records: &mut Records,
    states: &[ClientState],
    log: &Path,
) -> anyhow::Result<usize> {
    if let Records::File = records {
        let mut command = Command::new(binary);
        command.arg("check").arg("--data-dir").arg(data);
        let output = command
            .output()
            .with_context(|| format!("could not run {command:?}"))?;
        std::fs::write(log, [&output.stdout[..], &output.stderr[..]].concat())?;
        if !output.status.success() {
            bail!(
                "`memlayer check` failed after a crash:\n{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
    let erased: std::collections::HashMap<&str, &str> = states
        .iter()
        .flat_map(|s| {
            s.erased
                .iter()
                .map(|(token, how)| (token.as_str(), how.as_str()))
        })
        .collect();
    let mut found = 0;
    for file in data_files(data, records)? {
        // A cluster's file may vanish while it runs (a WAL segment retired, a temporary file).
        let bytes = match std::fs::read(&file) {
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            read => read.with_context(|| format!("could not read {}", file.display()))?,
        };
        let tokens: Vec<&str> = tokens_in(&bytes).collect();
        found += tokens.len();
        let left: Vec<String> = tokens
            .iter()
            .filter_map(|token| Some(format!("{token} ({})", erased.get(token)?)))
            .collect();
        if !left.is_empty() {
            bail!(
                "{} erased text(s) still in {}: {left:?}",
                left.len(),
                file.display()
            );
        }
        if let (Records::Postgres(_), Some(token)) = (&*records, tokens.first()) {
            bail!("{token} is in plain in {}", file.display());
        }
    }
    Ok(found)
}

/// The data directory's files: the store file (unless the records are in PostgreSQL), the
/// vector index snapshot, and what a save killed mid-write left (the next start removes it).
const DATA_FILES: [&str; 3] = ["memlayer.redb", SNAPSHOT_FILE, SNAPSHOT_TEMP];

/// The files holding the records and what is derived from them: the data directory's, and
/// on PostgreSQL every file of the cluster.
fn data_files(data: &Path, records: &mut Records) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = DATA_FILES
        .into_iter()
        .map(|name| data.join(name))
        .filter(|path| path.exists())
        .collect();
    if let Records::Postgres(cluster) = records {
        let mut pending = vec![PathBuf::from(cluster.ask("directory")?)];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir)
                .with_context(|| format!("could not list {}", dir.display()))?
            {
                let entry = entry?;
                let kind = entry.file_type()?;
                // Not the server's socket, which holds nothing and cannot be read.
                if kind.is_dir() {
                    pending.push(entry.path());
                } else if kind.is_file() {
                    files.push(entry.path());
                }
            }
        }
    }
    Ok(files)
}

/// What the records take: the data directory's files, or on PostgreSQL the database's size
/// and the data directory's snapshot.
fn data_size(data: &Path, records: &mut Records) -> anyhow::Result<u64> {
    let local: u64 = DATA_FILES
        .into_iter()
        .filter_map(|name| std::fs::metadata(data.join(name)).ok())
        .map(|m| m.len())
        .sum();
    let database = match records {
        Records::File => 0,
        Records::Postgres(cluster) => cluster
            .ask("size")?
            .parse()
            .context("the test database's size is not a number")?,
    };
    Ok(local + database)
}

/// Every planted token in `bytes`: the prefix and the 16 hex digits after it.
fn tokens_in(bytes: &[u8]) -> impl Iterator<Item = &str> {
    let prefix = TOKEN_PREFIX.as_bytes();
    let length = prefix.len() + 16;
    bytes
        .windows(prefix.len())
        .enumerate()
        .filter(move |(_, window)| *window == prefix)
        .filter_map(move |(at, _)| std::str::from_utf8(bytes.get(at..at + length)?).ok())
}

fn report(options: &Options, tally: &Tally, states: &[ClientState], size: u64) {
    let mut recoveries = tally.recoveries.clone();
    recoveries.sort();
    let median = recoveries
        .get(recoveries.len() / 2)
        .copied()
        .unwrap_or_default();
    let max = recoveries.last().copied().unwrap_or_default();
    let erased: usize = states.iter().map(|s| s.erased.len()).sum();
    let messages: usize = states
        .iter()
        .flat_map(|s| s.sessions.values().chain(s.shared.values()))
        .map(Vec::len)
        .sum();
    println!("## memlayer crash test");
    println!();
    println!(
        "- command: `cargo xtask {}`",
        std::env::args().skip(1).collect::<Vec<_>>().join(" ")
    );
    println!(
        "- server build: {}",
        if options.release { "release" } else { "debug" }
    );
    if options.postgres {
        println!(
            "- {} kills while {} clients + 1 purging client ran, in turn of the server \
             (SIGKILL), PostgreSQL and the server, PostgreSQL alone (`pg_ctl stop -m \
             immediate`, the server kept running); {} more of the server during start-up; {} \
             byte scans of every file of the cluster and the data directory found no planted \
             text in plain",
            options.kills, options.clients, tally.start_kills, tally.file_checks
        );
    } else {
        println!(
            "- {} SIGKILLs while {} clients + 1 purging client ran, {} more during start-up; \
             {} file checks with the server down (their byte scans found {} planted texts, \
             none of them erased)",
            options.kills,
            options.clients,
            tally.start_kills,
            tally.file_checks,
            tally.tokens_scanned
        );
    }
    println!(
        "- {} kills aimed at a vector index snapshot save (every {SNAPSHOT_INTERVAL_SECS} s \
         while the index changes), {} of them during one",
        tally.snapshot_kills, tally.snapshot_kills_landed
    );
    println!(
        "- {} operations acknowledged, {} in flight at a kill (settled after the restart), \
         {messages} live messages, {erased} erased texts, data {:.1} MiB",
        tally.acknowledged,
        tally.uncertain,
        size as f64 / (1024.0 * 1024.0)
    );
    println!(
        "- recovery (server spawned, or database back, to ready): median {:.2} s, max {:.2} s",
        median.as_secs_f64(),
        max.as_secs_f64()
    );
    println!("- violations: 0");
}
