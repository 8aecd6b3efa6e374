//! The load generator: concurrent clients appending messages (or asking for a turn's
//! context) over HTTP, each timing its own requests, and the latency summary computed from
//! what they measured.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde::Serialize;

/// What each client does, and how many do it at once. Each client is one task with one
/// request in flight.
#[derive(Clone, Copy)]
pub(crate) struct Scenario {
    pub(crate) workload: Workload,
    pub(crate) clients: usize,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Workload {
    /// Each client appends one message at a time to a session of its own.
    Append,
    /// Each client asks for the next turn's context (combined strategy, with a query) of a
    /// session of its own holding [`CONTEXT_TURNS`] exchanges.
    Context,
    /// Each client asks `/v1/recall` for 10 hits in the user's sessions (its own holds
    /// [`CONTEXT_TURNS`] exchanges), a new query every time: the query's embedding is part
    /// of each request.
    Recall,
    /// The same with one query repeated: the embedder's cache answers for the query, so
    /// this is the search alone.
    RecallRepeated,
    /// Each client reads a session of its own (`GET /v1/sessions/{id}`, one exchange, created
    /// first): a request that neither writes nor embeds. Run after appends, it shows what the
    /// embedding backlog's background work costs other requests.
    ReadSession,
    /// Each client appends an exchange to a new session of its own (not timed) and erases
    /// the session (`DELETE /v1/sessions/{id}`, timed: it answers once no byte is left).
    /// Run after appends, it meets the embedding backlog they left.
    Erase,
}

impl Workload {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Append => "append",
            Self::Context => "context",
            Self::Recall => "recall",
            Self::RecallRepeated => "recall, query embedded before",
            Self::ReadSession => "read a session",
            Self::Erase => "erase a session",
        }
    }

    /// Whether each client's session is filled with [`CONTEXT_TURNS`] exchanges first.
    fn reads_a_filled_session(self) -> bool {
        matches!(self, Self::Context | Self::Recall | Self::RecallRepeated)
    }
}

/// Exchanges in each session a context is asked of: a long conversation, whose window and
/// recalled turns are a small part.
pub(crate) const CONTEXT_TURNS: usize = 100;

/// Longest the context scenario waits for its sessions to be embedded.
const EMBEDDING_WAIT: Duration = Duration::from_secs(300);

/// A stuck request fails instead of hanging the run, so the benchmark always ends by itself.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Serialize)]
struct Append<'a> {
    user_id: &'a str,
    agent_id: &'a str,
    role: &'a str,
    content: String,
}

#[derive(Serialize)]
struct Batch<'a> {
    user_id: &'a str,
    agent_id: &'a str,
    messages: Vec<Line>,
}

#[derive(Serialize)]
struct Line {
    role: &'static str,
    content: String,
}

#[derive(Serialize)]
struct RecallRequest<'a> {
    user_id: &'a str,
    query: String,
    k: usize,
}

#[derive(Serialize)]
struct ContextRequest {
    query: String,
    settings: serde_json::Value,
}

/// What went wrong with failed requests, by kind, with one example of each.
#[derive(Default)]
struct Errors(BTreeMap<String, (u64, String)>);

impl Errors {
    fn record(&mut self, kind: String, example: impl FnOnce() -> String) {
        self.0.entry(kind).or_insert_with(|| (0, example())).0 += 1;
    }

    fn merge(&mut self, other: Errors) {
        for (kind, (count, example)) in other.0 {
            self.0.entry(kind).or_insert((0, example)).0 += count;
        }
    }
}

#[derive(Default)]
struct ClientResult {
    latencies: Vec<Duration>,
    errors: Errors,
}

pub(crate) struct ScenarioResult {
    workload: Workload,
    clients: usize,
    /// Sorted, for the percentiles.
    latencies: Vec<Duration>,
    errors: Errors,
    /// From the end of the warm-up until the last client finished its last request.
    elapsed: Duration,
    /// The CPU time this process, the load generator, used meanwhile, as a share of one
    /// core: on a machine whose cores the server shares with it, what it takes from the
    /// server (`None` where `/proc/self/stat` cannot be read).
    client_cores: Option<f64>,
}

/// Runs one scenario: every client sends requests until the deadline, and only requests
/// started after the warm-up are counted. The sessions a context is asked of are filled
/// first, outside the clock. Client `n` talks to `servers[n % servers.len()]`: several
/// nodes serving one database share the clients as a load balancer would.
pub(crate) async fn run(
    servers: &[SocketAddr],
    scenario: Scenario,
    warm_up: Duration,
    measured: Duration,
) -> anyhow::Result<ScenarioResult> {
    // `no_proxy` keeps a proxy from the environment from intercepting 127.0.0.1 traffic.
    let http = crate::server::admin_client(REQUEST_TIMEOUT)?;
    anyhow::ensure!(!servers.is_empty(), "no server to load");
    let server = |client: usize| servers[client % servers.len()];
    let session = |client: usize| {
        format!(
            "http://{}/v1/sessions/bench-{:?}-c{}-{client}",
            server(client),
            scenario.workload,
            scenario.clients
        )
    };
    if scenario.workload.reads_a_filled_session() {
        for client in 0..scenario.clients {
            fill(&http, &format!("{}/messages", session(client)), client).await?;
        }
        // A context's recall waits (up to a bound) for the session's messages to be
        // embedded: measured while the embedder is behind, it would time that wait.
        for &addr in servers {
            wait_for_embeddings(&http, addr).await?;
        }
    }
    if scenario.workload == Workload::ReadSession {
        for client in 0..scenario.clients {
            fill_exchange(&http, &session(client), sentence(client, 0))
                .await
                .map_err(anyhow::Error::msg)?;
        }
    }
    let start = Instant::now();
    let measure_from = start + warm_up;
    let end = measure_from + measured;

    let tasks: Vec<_> = (0..scenario.clients)
        .map(|client| {
            let url = match scenario.workload {
                Workload::Append => format!("{}/messages", session(client)),
                Workload::Erase | Workload::ReadSession => session(client),
                Workload::Context => format!("{}/context", session(client)),
                Workload::Recall | Workload::RecallRepeated => {
                    format!("http://{}/v1/recall", server(client))
                }
            };
            let run = Client {
                http: http.clone(),
                url,
                workload: scenario.workload,
                number: client,
            };
            tokio::spawn(run.requests(measure_from, end))
        })
        .collect();
    tokio::time::sleep_until(measure_from.into()).await;
    let cpu_from = own_cpu_time();
    let mut latencies = Vec::new();
    let mut errors = Errors::default();
    for task in tasks {
        let client = task.await?;
        latencies.extend(client.latencies);
        errors.merge(client.errors);
    }
    let elapsed = measure_from.elapsed();
    let client_cores = cpu_from
        .zip(own_cpu_time())
        .map(|(from, to)| to.saturating_sub(from).as_secs_f64() / elapsed.as_secs_f64());
    latencies.sort_unstable();
    Ok(ScenarioResult {
        workload: scenario.workload,
        clients: scenario.clients,
        latencies,
        errors,
        elapsed,
        client_cores,
    })
}

/// The CPU time this process has used so far, all its threads, from `/proc/self/stat`.
fn own_cpu_time() -> Option<Duration> {
    cpu_time_of_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

/// User plus system time of a `/proc/<pid>/stat` line (fields 14 and 15), counted in
/// 1/100 s: `USER_HZ`, which Linux fixes at 100 for every program whatever its own tick.
fn cpu_time_of_stat(stat: &str) -> Option<Duration> {
    // Field 2, the command name, is in parentheses and may hold spaces and parentheses of
    // its own; field 3 comes after the last `)`.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(14 - 3);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((user + system) * 10))
}

/// Runs each of `scenarios` in turn against `servers` (see [`run`]), saying which on stderr.
pub(crate) fn run_each(
    runtime: &tokio::runtime::Runtime,
    servers: &[SocketAddr],
    scenarios: &[Scenario],
    warm_up: Duration,
    measured: Duration,
) -> anyhow::Result<Vec<ScenarioResult>> {
    scenarios
        .iter()
        .map(|&scenario| {
            eprintln!(
                "xtask: {} by {} client(s), {} s warm-up then {} s measured",
                scenario.workload.name(),
                scenario.clients,
                warm_up.as_secs(),
                measured.as_secs()
            );
            runtime.block_on(run(servers, scenario, warm_up, measured))
        })
        .collect()
}

/// Appends [`CONTEXT_TURNS`] exchanges to the session at `url` in one batch.
async fn fill(http: &reqwest::Client, url: &str, client: usize) -> anyhow::Result<()> {
    let messages = (0..CONTEXT_TURNS)
        .flat_map(|turn| {
            [
                Line {
                    role: "user",
                    content: sentence(client, turn),
                },
                Line {
                    role: "assistant",
                    content: format!("Noted, answer {turn}: {}", sentence(client + 1, turn)),
                },
            ]
        })
        .collect();
    append_lines(http, url, messages)
        .await
        .map_err(anyhow::Error::msg)
}

/// Appends `messages` in one request to the session whose `/messages` route is `url`.
async fn append_lines(
    http: &reqwest::Client,
    url: &str,
    messages: Vec<Line>,
) -> Result<(), String> {
    let body = Batch {
        user_id: "bench",
        agent_id: "bench",
        messages,
    };
    send(http.post(url).json(&body))
        .await
        .map_err(|(kind, example)| format!("filling {url} answered {kind}: {example}"))
}

/// Waits until the server has embedded every appended message.
async fn wait_for_embeddings(http: &reqwest::Client, addr: SocketAddr) -> anyhow::Result<()> {
    let deadline = Instant::now() + EMBEDDING_WAIT;
    loop {
        match super::purge::pending_embeddings(http, addr).await {
            Some(0) => return Ok(()),
            pending if Instant::now() > deadline => {
                anyhow::bail!("the server still had {pending:?} messages to embed")
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// One client of a scenario.
struct Client {
    http: reqwest::Client,
    url: String,
    workload: Workload,
    number: usize,
}

impl Client {
    /// Sends requests one after the other until `end`, timing those started after
    /// `measure_from`.
    async fn requests(self, measure_from: Instant, end: Instant) -> ClientResult {
        let mut result = ClientResult::default();
        let mut sequence = 0;
        while Instant::now() < end {
            let text = match self.workload {
                Workload::RecallRepeated => sentence(self.number, 0),
                _ => sentence(self.number, sequence),
            };
            sequence += 1;
            let request = match self.workload {
                Workload::Append => self.http.post(&self.url).json(&Append {
                    user_id: "bench",
                    agent_id: "bench",
                    role: "user",
                    content: text,
                }),
                Workload::Context => self.http.post(&self.url).json(&ContextRequest {
                    query: text,
                    settings: serde_json::json!({ "strategy": "combined" }),
                }),
                Workload::Recall | Workload::RecallRepeated => {
                    self.http.post(&self.url).json(&RecallRequest {
                        user_id: "bench",
                        query: text,
                        k: 10,
                    })
                }
                Workload::ReadSession => self.http.get(&self.url),
                Workload::Erase => {
                    let doomed = format!("{}-{sequence}", self.url);
                    if let Err(error) = fill_exchange(&self.http, &doomed, text).await {
                        result
                            .errors
                            .record("filling the session".to_owned(), || error);
                        continue;
                    }
                    self.http.delete(doomed)
                }
            };
            let started = Instant::now();
            let outcome = send(request).await;
            if started >= measure_from {
                result.record(started.elapsed(), outcome);
            }
        }
        result
    }
}

impl ClientResult {
    /// Counts a request's latency, or its failure by kind.
    fn record(&mut self, latency: Duration, outcome: Result<(), (String, String)>) {
        match outcome {
            Ok(()) => self.latencies.push(latency),
            Err((kind, example)) => self.errors.record(kind, || example),
        }
    }
}

/// Sends `request` and reads the whole answer: the request is complete only when it has
/// arrived, and reading it lets the connection be reused. A failure comes as its kind and
/// an example.
async fn send(request: reqwest::RequestBuilder) -> Result<(), (String, String)> {
    match request.send().await {
        Ok(response) if response.status().is_success() => response
            .bytes()
            .await
            .map(drop)
            .map_err(|error| ("transport error".to_owned(), error.to_string())),
        Ok(response) => {
            let kind = format!("HTTP {}", response.status());
            let body = response.text().await.unwrap_or_default();
            Err((kind, body))
        }
        Err(error) => Err(("transport error".to_owned(), error.to_string())),
    }
}

/// Creates the session at `url` with one exchange about `text`.
async fn fill_exchange(http: &reqwest::Client, url: &str, text: String) -> Result<(), String> {
    let exchange = vec![
        Line {
            role: "user",
            content: text,
        },
        Line {
            role: "assistant",
            content: "Noted.".to_owned(),
        },
    ];
    append_lines(http, &format!("{url}/messages"), exchange).await
}

/// A chat-like sentence of about twenty words that differs from request to request, so the
/// server tokenises and stores realistic, non-repeating text.
pub(crate) fn sentence(client: usize, sequence: usize) -> String {
    const OPENERS: [&str; 4] = [
        "Can you remind me",
        "I was wondering",
        "Please help me work out",
        "Quick question about",
    ];
    const TOPICS: [&str; 5] = [
        "what we decided about the quarterly budget review",
        "which hotel we booked for the Lisbon conference",
        "how the onboarding flow handles expired invitation links",
        "why the nightly backup job failed again on Tuesday",
        "who owns the migration plan for the billing database",
    ];
    const CLOSERS: [&str; 3] = [
        "before my meeting this afternoon?",
        "so I can update the team tonight?",
        "because the client asked me directly?",
    ];
    format!(
        "{} {} {} (note {client}-{sequence})",
        OPENERS[sequence % OPENERS.len()],
        TOPICS[(sequence / OPENERS.len() + client) % TOPICS.len()],
        CLOSERS[(sequence + client) % CLOSERS.len()],
    )
}

/// The nearest-rank percentile of sorted samples: the smallest sample that at least `p`
/// percent of all samples are less than or equal to. It always returns a measured value,
/// never an interpolation between two.
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    let last = sorted.len().checked_sub(1)?;
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.saturating_sub(1).min(last)])
}

/// Prints a report's heading: `title`, the command that ran it, the date and the machine
/// (`machine` follows the CPU count and the platform).
pub(crate) fn print_heading(title: &str, machine: &str) -> anyhow::Result<()> {
    let command_line: Vec<String> = std::env::args().skip(1).collect();
    let mut date = std::process::Command::new("date");
    date.args(["-u", "+%Y-%m-%d %H:%M:%S UTC"]);
    let date = crate::cmd::output(date)?;
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    println!("## {title}");
    println!();
    println!("- command: `cargo xtask {}`", command_line.join(" "));
    println!("- date: {}", date.trim());
    println!(
        "- machine: {cpus} CPUs (available parallelism), {} {}{machine}",
        std::env::consts::OS,
        std::env::consts::ARCH
    );
    println!(
        "- client's cores: the CPU time the load generator (this process) used while it \
         measured, in cores; on a machine it shares, the server had that much less"
    );
    Ok(())
}

/// Prints `results` as a markdown table under `heading`, then one line per kind of failure.
pub(crate) fn print_results(heading: &str, results: &[ScenarioResult]) {
    println!();
    println!("### {heading}");
    println!();
    println!(
        "| workload | clients | requests | errors | requests/s | p50 ms | p90 ms | p95 ms | p99 ms | max ms | client's cores |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for result in results {
        println!("{}", result.table_row());
    }
    for result in results {
        for line in result.error_lines() {
            println!();
            println!("{line}");
        }
    }
}

impl ScenarioResult {
    pub(crate) fn error_count(&self) -> u64 {
        self.errors.0.values().map(|(count, _)| count).sum()
    }

    fn table_row(&self) -> String {
        let ms = |p: f64| {
            percentile(&self.latencies, p).map_or_else(
                || "-".to_owned(),
                |latency| format!("{:.2}", latency.as_secs_f64() * 1000.0),
            )
        };
        let errors = self.error_count();
        let requests = self.latencies.len() as u64 + errors;
        let throughput = self.latencies.len() as f64 / self.elapsed.as_secs_f64();
        let client_cores = self
            .client_cores
            .map_or_else(|| "-".to_owned(), |cores| format!("{cores:.2}"));
        format!(
            "| {} | {} | {requests} | {errors} | {throughput:.0} | {} | {} | {} | {} | {} | {client_cores} |",
            self.workload.name(),
            self.clients,
            ms(50.0),
            ms(90.0),
            ms(95.0),
            ms(99.0),
            ms(100.0),
        )
    }

    /// One line per kind of failure, with the first example the clients saw.
    fn error_lines(&self) -> Vec<String> {
        self.errors
            .0
            .iter()
            .map(|(kind, (count, example))| {
                format!(
                    "{} by {} client(s): {count} × {kind}, e.g. `{}`",
                    self.workload.name(),
                    self.clients,
                    example.chars().take(200).collect::<String>()
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: &[u64]) -> Vec<Duration> {
        values.iter().copied().map(Duration::from_millis).collect()
    }

    #[test]
    fn percentile_of_nothing_is_none() {
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn percentile_uses_nearest_rank() {
        let samples = ms(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        assert_eq!(percentile(&samples, 50.0), Some(Duration::from_millis(5)));
        assert_eq!(percentile(&samples, 90.0), Some(Duration::from_millis(9)));
        assert_eq!(percentile(&samples, 99.0), Some(Duration::from_millis(10)));
        assert_eq!(percentile(&samples, 100.0), Some(Duration::from_millis(10)));
        assert_eq!(percentile(&samples, 0.0), Some(Duration::from_millis(1)));
    }

    #[test]
    fn percentile_of_one_sample_is_that_sample() {
        let samples = ms(&[7]);
        for p in [0.0, 50.0, 99.0, 100.0] {
            assert_eq!(percentile(&samples, p), Some(Duration::from_millis(7)));
        }
    }

    #[test]
    fn percentile_rounds_the_rank_up() {
        // 99% of 101 samples is 99.99 of them, so the 100th sample is the first with at
        // least 99% at or below it.
        let samples: Vec<Duration> = (1..=101).map(Duration::from_millis).collect();
        assert_eq!(percentile(&samples, 99.0), Some(Duration::from_millis(100)));
    }

    #[test]
    fn sentences_vary_and_read_like_chat() {
        let first = sentence(0, 0);
        assert_ne!(first, sentence(0, 1));
        assert_ne!(first, sentence(1, 0));
        let words = first.split_whitespace().count();
        assert!((15..=25).contains(&words), "{words} words: {first}");
    }

    #[test]
    fn errors_merge_by_kind_and_keep_the_first_example() {
        let mut left = Errors::default();
        left.record("HTTP 500".to_owned(), || "first".to_owned());
        let mut right = Errors::default();
        right.record("HTTP 500".to_owned(), || "second".to_owned());
        right.record("transport error".to_owned(), || "reset".to_owned());
        left.merge(right);
        let result = ScenarioResult {
            workload: Workload::Append,
            clients: 2,
            latencies: ms(&[1, 3]),
            errors: left,
            elapsed: Duration::from_secs(1),
            client_cores: Some(0.304),
        };
        assert_eq!(result.error_count(), 3);
        assert_eq!(
            result.error_lines(),
            [
                "append by 2 client(s): 2 × HTTP 500, e.g. `first`",
                "append by 2 client(s): 1 × transport error, e.g. `reset`"
            ]
        );
        assert_eq!(
            result.table_row(),
            "| append | 2 | 5 | 3 | 2 | 1.00 | 3.00 | 3.00 | 3.00 | 3.00 | 0.30 |"
        );
    }

    #[test]
    fn cpu_time_is_read_after_a_command_name_with_spaces_and_parentheses() {
        // /proc/<pid>/stat of a process named "a) (b c", 250 ticks user, 17 system.
        let stat = "4242 (a) (b c) S 1 4242 4242 0 -1 4194560 1500 0 0 0 250 17 0 0 20 0 \
                    9 0 123456 1000000 500 18446744073709551615";
        assert_eq!(cpu_time_of_stat(stat), Some(Duration::from_millis(2670)));
        assert_eq!(cpu_time_of_stat("4242 (cut short) S 1"), None);
        assert_eq!(cpu_time_of_stat("no name at all"), None);
    }

    #[test]
    fn this_process_reads_its_own_cpu_time() {
        assert!(
            own_cpu_time().is_some(),
            "/proc/self/stat is readable on Linux"
        );
    }
}
