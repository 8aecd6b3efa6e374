//! `cargo xtask load`: the server under a realistic load and under overload, with auth on.
//!
//! Turns: each of `clients` clients (default 64) plays one conversation with a service key —
//! append the user's message, ask for the context of the next model call, append the
//! answer — for a bounded time; the report gives throughput and p50/p99 per route.
//!
//! Overload: `overload_clients` clients (default 500) append as fast as they can to a server
//! admitting only `max_in_flight` requests at once. The report shows that refusals are fast
//! `503 overloaded` answers with `Retry-After`, the server's peak memory, and — read back
//! after the run — that every acknowledged append is stored exactly once, in order, and no
//! refused one is.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use serde_json::{Value, json};

use crate::bench::{percentile, sentence};
use crate::server::{ADMIN_KEY, Server, client_with_key};
use crate::{cmd, metadata};

/// A stuck request fails instead of hanging the run.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// An empty data directory: the server starts in seconds.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) struct Options {
    pub(crate) clients: usize,
    pub(crate) overload_clients: usize,
    pub(crate) max_in_flight: usize,
    pub(crate) seconds: u64,
}

/// Latencies of one kind of answer, and the first body of each unexpected one.
#[derive(Default)]
struct Samples {
    by_kind: BTreeMap<String, Vec<Duration>>,
    examples: BTreeMap<String, String>,
}

impl Samples {
    fn record(&mut self, kind: String, latency: Duration) {
        self.by_kind.entry(kind).or_default().push(latency);
    }

    fn merge(&mut self, other: Samples) {
        for (kind, latencies) in other.by_kind {
            self.by_kind.entry(kind).or_default().extend(latencies);
        }
        for (kind, example) in other.examples {
            self.examples.entry(kind).or_insert(example);
        }
    }

    fn rows(&mut self, elapsed: Duration) -> Vec<String> {
        self.by_kind
            .iter_mut()
            .map(|(kind, latencies)| {
                latencies.sort_unstable();
                let ms = |p| {
                    percentile(latencies, p)
                        .map_or(0.0, |latency: Duration| latency.as_secs_f64() * 1000.0)
                };
                format!(
                    "| {kind} | {} | {:.0} | {:.2} | {:.2} | {:.2} |",
                    latencies.len(),
                    latencies.len() as f64 / elapsed.as_secs_f64(),
                    ms(50.0),
                    ms(99.0),
                    ms(100.0)
                )
            })
            .collect()
    }

    fn count(&self, kind: &str) -> usize {
        self.by_kind.get(kind).map_or(0, Vec::len)
    }

    /// Every kind that is not one of `expected`, with its count.
    fn unexpected(&self, expected: &[&str]) -> Vec<String> {
        self.by_kind
            .iter()
            .filter(|(kind, _)| !expected.contains(&kind.as_str()))
            .map(|(kind, latencies)| {
                let example = self.examples.get(kind).map_or("", String::as_str);
                format!("{} × {kind}: {example}", latencies.len())
            })
            .collect()
    }
}

/// One request's outcome: the kind (`route status[ code]`), and the body.
async fn send(
    request: reqwest::RequestBuilder,
    route: &str,
    samples: &mut Samples,
) -> (String, Value) {
    let started = Instant::now();
    let (kind, body) = match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            let code = body["error"]["code"]
                .as_str()
                .map(|code| format!(" {code}"));
            (
                format!("{route} {status}{}", code.unwrap_or_default()),
                body,
            )
        }
        Err(err) => {
            let kind = format!("{route} transport error");
            (kind, json!(err.to_string()))
        }
    };
    samples.record(kind.clone(), started.elapsed());
    samples
        .examples
        .entry(kind.clone())
        .or_insert_with(|| body.to_string().chars().take(200).collect());
    (kind, body)
}

pub(crate) fn run(root: &Path, options: &Options) -> anyhow::Result<()> {
    cmd::cargo(root, &["build", "--release", "-p", "memlayer"])?;
    let target_dir = metadata::read(root)?.target_directory;
    let binary = target_dir.join("release").join("memlayer");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("could not start the client runtime")?;
    let measured = Duration::from_secs(options.seconds);

    let data = tempfile::Builder::new()
        .prefix("memlayer-load-")
        .tempdir()?;
    let log = target_dir.join("load-server.log");
    let server = Server::start(&binary, data.path(), &log)?;
    eprintln!(
        "xtask: {} clients playing turns for {} s",
        options.clients, options.seconds
    );
    let (mut turns, turns_elapsed) =
        runtime.block_on(turns(server.addr(), options.clients, measured))?;
    server.stop()?;

    let data = tempfile::Builder::new()
        .prefix("memlayer-overload-")
        .tempdir()?;
    let log = target_dir.join("overload-server.log");
    let limit = options.max_in_flight.to_string();
    let server = Server::start_with(
        &binary,
        data.path(),
        &log,
        STARTUP_TIMEOUT,
        &[("MEMLAYER_MAX_IN_FLIGHT", &limit)],
    )?;
    eprintln!(
        "xtask: {} clients appending against --max-in-flight {limit} for {} s",
        options.overload_clients, options.seconds
    );
    let overload = runtime.block_on(overload(server.addr(), options.overload_clients, measured))?;
    let peak_rss = server.peak_rss_kib()?;
    server.stop()?;

    let command: Vec<String> = std::env::args().skip(1).collect();
    println!("## Load and overload over HTTP, auth on");
    println!();
    println!("- command: `cargo xtask {}`", command.join(" "));
    println!(
        "- date: {}",
        cmd::output({
            let mut date = std::process::Command::new("date");
            date.args(["-u", "+%Y-%m-%d %H:%M UTC"]);
            date
        })?
        .trim()
    );
    println!(
        "- machine: {} CPUs; release server and the load generator share it; load average {}",
        std::thread::available_parallelism().map_or(0, usize::from),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    println!();
    println!(
        "### Turns: {} clients, each append → context → append in its own session, {} s",
        options.clients, options.seconds
    );
    println!();
    println!("| route and answer | requests | per s | p50 ms | p99 ms | max ms |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for row in turns.rows(turns_elapsed) {
        println!("{row}");
    }
    println!();
    let mut samples = overload.samples;
    println!(
        "### Overload: {} clients appending, --max-in-flight {limit}, {} s",
        options.overload_clients, options.seconds
    );
    println!();
    println!("| route and answer | requests | per s | p50 ms | p99 ms | max ms |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for row in samples.rows(overload.elapsed) {
        println!("{row}");
    }
    println!();
    println!(
        "- server peak memory (VmHWM): {:.0} MiB; read back after the run: {} acknowledged \
         appends all stored once and in order, {} refused ones absent",
        peak_rss as f64 / 1024.0,
        overload.acknowledged,
        overload.refused
    );

    let mut problems = turns.unexpected(&["append 201", "context 200"]);
    problems.extend(samples.unexpected(&["append 201", "append 503 overloaded"]));
    if !problems.is_empty() {
        bail!("unexpected answers:\n{}", problems.join("\n"));
    }
    ensure!(
        samples.count("append 503 overloaded") > 0,
        "no request was shed: the overload did not overload"
    );
    Ok(())
}

fn client(key: &str) -> anyhow::Result<reqwest::Client> {
    client_with_key(key, REQUEST_TIMEOUT)
}

/// A service key, as an agent backend would use, created by the operator's admin key.
async fn service_key(addr: SocketAddr) -> anyhow::Result<String> {
    let created: Value = client(ADMIN_KEY)?
        .post(format!("http://{addr}/v1/keys"))
        .json(&json!({ "role": "service", "name": "load test" }))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    created["key"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("no key in {created}"))
}

async fn turns(
    addr: SocketAddr,
    clients: usize,
    measured: Duration,
) -> anyhow::Result<(Samples, Duration)> {
    let http = client(&service_key(addr).await?)?;
    let started = Instant::now();
    let end = started + measured;
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let http = http.clone();
            tokio::spawn(async move {
                let mut samples = Samples::default();
                let session = format!("http://{addr}/v1/sessions/turns-{client}");
                let mut turn = 0;
                while Instant::now() < end {
                    let question = sentence(client, turn);
                    let user = json!({ "user_id": format!("user-{client}"), "agent_id": "load",
                        "role": "user", "content": question });
                    send(
                        http.post(format!("{session}/messages")).json(&user),
                        "append",
                        &mut samples,
                    )
                    .await;
                    let query = json!({ "query": question });
                    send(
                        http.post(format!("{session}/context")).json(&query),
                        "context",
                        &mut samples,
                    )
                    .await;
                    let answer = json!({ "role": "assistant",
                        "content": format!("Here is what I found about turn {turn}.") });
                    send(
                        http.post(format!("{session}/messages")).json(&answer),
                        "append",
                        &mut samples,
                    )
                    .await;
                    turn += 1;
                }
                samples
            })
        })
        .collect();
    let mut samples = Samples::default();
    for task in tasks {
        samples.merge(task.await?);
    }
    Ok((samples, started.elapsed()))
}

struct Overload {
    samples: Samples,
    elapsed: Duration,
    acknowledged: usize,
    refused: usize,
}

async fn overload(
    addr: SocketAddr,
    clients: usize,
    measured: Duration,
) -> anyhow::Result<Overload> {
    let http = client(&service_key(addr).await?)?;
    let started = Instant::now();
    let end = started + measured;
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let http = http.clone();
            tokio::spawn(async move {
                let mut samples = Samples::default();
                let url = format!("http://{addr}/v1/sessions/overload-{client}/messages");
                let (mut acknowledged, mut refused) = (Vec::new(), 0);
                let mut sequence = 0;
                while Instant::now() < end {
                    let content = sentence(client, sequence);
                    sequence += 1;
                    let body = json!({ "user_id": "load", "agent_id": "load", "role": "user",
                        "content": content });
                    let (kind, answer) =
                        send(http.post(&url).json(&body), "append", &mut samples).await;
                    match kind.as_str() {
                        "append 201" => acknowledged.push((answer["indices"][0].as_u64(), content)),
                        "append 503 overloaded" => refused += 1,
                        _ => {}
                    }
                }
                (samples, acknowledged, refused)
            })
        })
        .collect();
    let mut outcome = Overload {
        samples: Samples::default(),
        elapsed: Duration::ZERO,
        acknowledged: 0,
        refused: 0,
    };
    let mut sessions = Vec::new();
    for (client, task) in tasks.into_iter().enumerate() {
        let (samples, acknowledged, refused) = task.await?;
        outcome.samples.merge(samples);
        outcome.refused += refused;
        sessions.push((client, acknowledged));
    }
    outcome.elapsed = started.elapsed();
    // Read back: the stored messages are exactly the acknowledged ones, at the indices the
    // server answered (a refused append would show as an extra message).
    for (client, acknowledged) in sessions {
        outcome.acknowledged += acknowledged.len();
        if acknowledged.is_empty() {
            continue;
        }
        let session: Value = http
            .get(format!("http://{addr}/v1/sessions/overload-{client}"))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let stored: Vec<&str> = session["messages"]
            .as_array()
            .context("a session without messages")?
            .iter()
            .filter_map(|message| message["content"].as_str())
            .collect();
        let expected: Vec<&str> = acknowledged.iter().map(|(_, text)| text.as_str()).collect();
        ensure!(
            stored == expected,
            "session overload-{client}: stored {} message(s), acknowledged {}",
            stored.len(),
            expected.len()
        );
        for (position, (index, _)) in acknowledged.iter().enumerate() {
            ensure!(
                *index == Some(position as u64),
                "session overload-{client}: append {position} was answered with index {index:?}"
            );
        }
    }
    Ok(outcome)
}
