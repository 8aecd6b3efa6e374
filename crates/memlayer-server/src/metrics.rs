//! Prometheus metrics: what the HTTP layer counts (requests by route template, method and
//! status class, their latency, the requests in flight) and the store and index figures read
//! at each scrape. `GET /metrics` answers them in the OpenMetrics text format.
//!
//! The crate is `prometheus-client`, the Prometheus project's own Rust client: its registry is
//! a value, so each server owns its metrics and tests that run many servers in one process do
//! not mix their counts, and it has no HTTP listener of its own. `metrics` with
//! `metrics-exporter-prometheus` was the alternative; it records through a process-wide
//! recorder, which is exactly what per-server metrics must avoid.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use memlayer_store::StoreError;

use crate::AppState;

/// Prefix of every metric name.
const PREFIX: &str = "memlayer";
/// Route label of requests no route matched: their raw paths would make one series per
/// probe of a scanner, so they share one.
pub(crate) const UNMATCHED: &str = "unmatched";
/// Method label of requests with a method the API does not use: HTTP allows any token as a
/// method, and an anonymous client sending a new one per request would otherwise add series
/// (and memory) for as long as the process lives.
const OTHER_METHOD: &str = "other";
/// Latency buckets in seconds: Prometheus' defaults, which span a cached read (milliseconds)
/// to a summarised context with a model behind it (seconds).
const LATENCY_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// The media type of the answer (OpenMetrics 1.0 text, which Prometheus asks for first).
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    /// The route template, such as `/v1/sessions/{session_id}`, never the raw path.
    route: String,
    /// One of [`method_label`]'s fixed set.
    method: &'static str,
    /// `2xx`, `4xx`, `5xx`…
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LatencyLabels {
    route: String,
    method: &'static str,
}

type LatencyFamily = Family<LatencyLabels, Histogram, fn() -> Histogram>;

/// The HTTP layer's metrics, owned by one [`AppState`].
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: LatencyFamily,
    in_flight: Gauge,
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let mut registry = Registry::with_prefix(PREFIX);
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests answered, by route template, method and status class",
            requests.clone(),
        );
        let latency: LatencyFamily =
            Family::new_with_constructor(|| Histogram::new(LATENCY_BUCKETS.iter().copied()));
        registry.register(
            "http_request_duration_seconds",
            "Time from receiving a request to its response head, by route template and method",
            latency.clone(),
        );
        let in_flight = Gauge::default();
        registry.register(
            "http_requests_in_flight",
            "HTTP requests being handled now",
            in_flight.clone(),
        );
        Self {
            registry,
            requests,
            latency,
            in_flight,
        }
    }
}

/// Middleware counting every request by its route template; runs inside the router (so
/// the template is known) and outside the timeout and load shedding (so their answers
/// count too).
pub(crate) async fn track(
    State(metrics): State<Arc<Metrics>>,
    request: Request,
    next: Next,
) -> Response {
    let route = route_label(&request).to_owned();
    let method = method_label(request.method());
    let started = Instant::now();
    // Decrements on drop, so a request whose client went away is not left in flight.
    let _in_flight = InFlight::enter(&metrics.in_flight);
    let response = next.run(request).await;
    metrics
        .latency
        .get_or_create(&LatencyLabels {
            route: route.clone(),
            method,
        })
        .observe(started.elapsed().as_secs_f64());
    metrics
        .requests
        .get_or_create(&RequestLabels {
            route,
            method,
            status: format!("{}xx", response.status().as_u16() / 100),
        })
        .inc();
    response
}

/// The route template a request matched, or [`UNMATCHED`]: a label from a fixed set, for the
/// metrics and the request's log lines (which must not carry the ids of a raw path either).
pub(crate) fn route_label(request: &Request) -> &str {
    request
        .extensions()
        .get::<MatchedPath>()
        .map_or(UNMATCHED, MatchedPath::as_str)
}

/// The request's method if the API knows it, else [`OTHER_METHOD`]: labels come from a fixed
/// set whatever a client sends.
pub(crate) fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        _ => OTHER_METHOD,
    }
}

/// One request counted in the in-flight gauge while this lives.
struct InFlight<'a>(&'a Gauge);

impl<'a> InFlight<'a> {
    fn enter(gauge: &'a Gauge) -> Self {
        gauge.inc();
        Self(gauge)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The whole exposition: the HTTP metrics and the store and index figures of `state`, read
/// now. Reads the store, so call it on the blocking pool.
pub(crate) fn render(state: &AppState) -> Result<String, String> {
    let mut figures = Registry::with_prefix(PREFIX);
    figures.register(
        "store_commits",
        "Write transactions the store committed since the process started",
        ConstCounter::new(*state.store().commits().borrow()),
    );
    figures.register(
        "index_vectors",
        "Messages with a vector in the vector index",
        ConstGauge::new(i64::try_from(state.recall().indexed_vectors()).unwrap_or(i64::MAX)),
    );
    figures.register(
        "index_keywords_pending",
        "1 while messages stored before the start wait for the keyword index's backfill: \
         keyword recall misses them until then",
        ConstGauge::new(i64::from(state.recall().keywords_pending())),
    );
    figures.register(
        "index_graph_pending",
        "1 while the message vector index waits for its HNSW graph (built in the background \
         after a start or an erasure): vector searches scan exactly until then",
        ConstGauge::new(i64::from(state.recall().graph_pending())),
    );
    figures.register(
        "nodes_live",
        "Nodes sharing the store's database, live by their follower records, this one \
         included (1 on a store file); each admits a key's requests at 1/nodes_live of its \
         rate limit",
        ConstGauge::new(i64::try_from(state.recall().live_nodes()).unwrap_or(i64::MAX)),
    );
    figures.register(
        "memory_graphs_pending",
        "Users' long-term memory partitions waiting for their HNSW graph (recalls scan them \
         exactly until then)",
        ConstGauge::new(i64::try_from(state.memories().graphs_pending()).unwrap_or(i64::MAX)),
    );
    let residency = state.memories().residency();
    for (name, help, figure) in [
        (
            "memory_resident_memories",
            "Long-term memories whose indexes are in memory",
            residency.memories,
        ),
        (
            "memory_resident_partitions",
            "Users whose long-term memory partition is in memory",
            residency.partitions,
        ),
        (
            "memory_resident_budget",
            "The budget resident memories plus resident partitions are kept within \
             (memory_resident_budget)",
            residency.budget,
        ),
    ] {
        figures.register(
            name,
            help,
            ConstGauge::new(i64::try_from(figure).unwrap_or(i64::MAX)),
        );
    }
    figures.register(
        "memory_partition_loads",
        "Users' long-term memory partitions loaded from the store since the start",
        ConstCounter::new(residency.loads),
    );
    figures.register(
        "memory_partition_evictions",
        "Users' long-term memory partitions evicted to stay within the budget since the start",
        ConstCounter::new(residency.evictions),
    );
    let queued = state.recall().embedder().queue_depths();
    for (name, help, batches) in [
        (
            "embed_queue_request_batches",
            "Batches of requests' texts (questions, memories) waiting for an embedding worker",
            queued.request,
        ),
        (
            "embed_queue_background_batches",
            "Batches of the indexing pipeline waiting for a background embedding worker (its \
             backpressure; requests' batches and the server's request threads take precedence)",
            queued.background,
        ),
    ] {
        figures.register(
            name,
            help,
            ConstGauge::new(i64::try_from(batches).unwrap_or(i64::MAX)),
        );
    }
    figures.register(
        "messages_appended",
        "Messages appended since the process started (idempotent replays not counted)",
        ConstCounter::new(state.store().appended_messages()),
    );
    figures.register(
        "erasures_finished",
        "Erasure jobs finished, their receipts written, since the process started",
        ConstCounter::new(state.erasure().finished()),
    );
    figures.register(
        "store_writes_refused",
        "1 while the store refuses writes after a disk fault (full or failing), until it is \
         reopened by itself; reads go on",
        ConstGauge::new(i64::from(state.store().refusals().borrow().is_some())),
    );
    match state.store().disk_space() {
        Ok(space) => {
            for (name, help, bytes) in [
                (
                    "store_size_bytes",
                    "Bytes the store file takes",
                    space.store_bytes,
                ),
                (
                    "disk_free_bytes",
                    "Bytes the server may still write on the data directory's file system",
                    space.free_bytes,
                ),
                (
                    "disk_size_bytes",
                    "Size of the data directory's file system in bytes",
                    space.size_bytes,
                ),
            ] {
                figures.register(
                    name,
                    help,
                    ConstGauge::new(i64::try_from(bytes).unwrap_or(i64::MAX)),
                );
            }
        }
        // A database's disk is its server's to watch.
        Err(StoreError::Unsupported(_)) => {}
        Err(err) => tracing::warn!(error = %err.for_log(), "metrics: cannot read the disk space"),
    }
    // A failed read leaves that one figure out rather than failing the scrape.
    for (name, help, count) in [
        (
            "embeddings_pending",
            "Appended messages the indexing pipeline has not embedded yet",
            state
                .store()
                .feed()
                .pending_embedding_count()
                .map_err(|err| err.for_log()),
        ),
        (
            "erasure_jobs_pending",
            "Erasure jobs recorded and not finished: running, or waiting for a retry",
            state.erasure().pending().map_err(|err| err.for_log()),
        ),
    ] {
        match count {
            Ok(count) => figures.register(
                name,
                help,
                ConstGauge::new(i64::try_from(count).unwrap_or(i64::MAX)),
            ),
            Err(err) => tracing::warn!(error = %err, "metrics: cannot read {name}"),
        }
    }
    let mut text = String::new();
    encode_registry(&mut text, &state.metrics().registry)
        .and_then(|()| encode_registry(&mut text, &figures))
        .and_then(|()| encode_eof(&mut text))
        .map_err(|err| format!("encoding metrics failed: {err}"))?;
    Ok(text)
}
