//! What every handler shares: the store, the server's settings and its metrics.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use memlayer_agent::{Agent, Tools};
use memlayer_erasure::Coordinator;
use memlayer_index::Recall;
use memlayer_llm::ChatClient;
use memlayer_memory::{ContextBuilder, LlmSummarizer, LongTermMemory, MemoryError, TokenEncoding};
use memlayer_store::Store;

use crate::metrics::Metrics;
use crate::rate_limit::{KeyRateLimiter, RateLimit};

/// Settings of the HTTP layer. The binary fills them from its command line and config file.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest request body accepted; larger ones get `413`.
    pub max_body_bytes: usize,
    /// Encoding used to count the tokens of messages whose client did not send a count.
    pub token_encoding: TokenEncoding,
    /// The chat model that summarises overflowing history; `None` keeps the offline
    /// extractive summariser (which also steps in whenever the model fails).
    pub summarizer_model: Option<ChatClient>,
    /// The chat model that answers agent runs (`POST /v1/agents/{id}/runs`); `None` refuses
    /// them with `503 model_not_configured`.
    pub agent_model: Option<ChatClient>,
    /// Longest a request may take, body included; a slower one is answered `503` with the
    /// code `timeout`. A write it started may still commit: clients retry appends with an
    /// idempotency key.
    pub request_timeout: Duration,
    /// Most API requests handled at once. One more is answered `503` with the code
    /// `overloaded` and `Retry-After` at once, never queued. The probes, `/metrics`,
    /// `/openapi.json`, `/docs` and `/admin` are not counted, so an overloaded server stays
    /// observable.
    /// Must be positive.
    pub max_in_flight: usize,
    /// A session with no activity for this long is ended as if its client had ended it
    /// (merged into session memory, in the background); zero never ends one.
    pub session_idle_timeout: Duration,
    /// How many requests each API key may make; `None` does not limit keys (load shedding
    /// still protects the server as a whole). On by default (see [`DEFAULT_RATE_LIMIT`]).
    pub rate_limit: Option<RateLimit>,
    /// Longest a client may take to send a request's head (request line and headers), and
    /// longest a kept-alive connection may wait for its next request; then the connection is
    /// closed. Without it a client sending a byte now and then (slowloris) holds a
    /// connection for ever. Must be positive.
    pub header_read_timeout: Duration,
    /// Most connections open at once; at the cap the server accepts no more until one closes
    /// (new ones wait in the listen backlog), probes included. Each costs a task, buffers and
    /// a file descriptor: keep the process's open-file limit (`ulimit -n`, often 1,024 by
    /// default) above it, or lower this. Must be positive.
    pub max_connections: usize,
    /// Most agent runs (`POST /v1/agents/{id}/runs`) going on at once. A run continues after
    /// its request: a streamed one answers its headers at once, a plain one goes on past the
    /// request timeout, so `max_in_flight` does not bound them. Each holds a model call of
    /// seconds and a context in memory; one more is answered `503 overloaded` with
    /// `Retry-After` before anything is stored. Must be positive.
    pub max_agent_runs: usize,
    /// Most long-term memories whose indexes stay in memory (each user's partition counting
    /// one more); past it, the users' partitions used least recently leave memory until
    /// their memories are next needed. At least 1.
    pub memory_resident_budget: usize,
    /// When less than this percentage of the data directory's file system is free, the log
    /// warns and `/readyz` says so (still ready), before the disk fills up and writes are
    /// refused; zero never warns. At most 100.
    pub disk_warning_free_percent: u8,
    /// This server's name in the leases of erasure jobs on a store several servers share
    /// (`memlayer_store::Eraser::claim_job`). Keep it across restarts (`memlayer serve`
    /// keeps it in the data directory): a restarted server then resumes its own interrupted
    /// erasures at once, before serving, where another name would wait for their lease to
    /// run out. `None`: a new random name at every start.
    pub node_id: Option<String>,
}

/// The per-key rate limit of a server on its defaults: 100 requests a second, in bursts of
/// up to 200. A conversation turn costs an agent backend three or four requests (append,
/// context, append, perhaps a recall), so one key may serve about 25 turns every second, far
/// more than a small deployment's model produces; an operator's export or import of a large
/// tenant is slowed, not stopped (the CLI waits out `Retry-After`). A client stuck in a loop,
/// which one connection drives at over a thousand requests a second, is held to a tenth of
/// that, leaving the server to the other keys.
pub const DEFAULT_RATE_LIMIT: RateLimit = RateLimit {
    per_second: NonZeroU32::new(100).unwrap(),
    burst: NonZeroU32::new(200).unwrap(),
};

impl ServerConfig {
    /// How long a request waits for an erasure it started (a route's, or a model's
    /// `memory_forget`): half the request timeout, which leaves the other half for what ran
    /// before and for answering. Past it the erasure goes on by itself: its compaction
    /// rewrites the whole store file, tens of seconds at a million messages, and an erasure
    /// cut off by the request timeout answered `503` and stopped where it got to.
    pub(crate) fn erasure_wait(&self) -> Duration {
        self.request_timeout / 2
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 1 << 20,
            token_encoding: TokenEncoding::default(),
            summarizer_model: None,
            agent_model: None,
            request_timeout: Duration::from_secs(30),
            // Tokio's blocking pool, where reads run, has 512 threads: past that, admitted
            // reads would only queue there.
            max_in_flight: 512,
            session_idle_timeout: Duration::from_secs(30 * 60),
            rate_limit: Some(DEFAULT_RATE_LIMIT),
            // A head is a few hundred bytes: even a congested mobile link sends it in well under
            // a second, and clients' pools reconnect an idle connection closed after 10 s. A
            // slowloris client gets 10 s per connection, not for ever.
            header_read_timeout: Duration::from_secs(10),
            // Twice `max_in_flight`: every admitted request's connection and as many idle
            // kept-alive ones, far more than a small deployment's clients open; each one's
            // task and buffers take tens of KiB.
            max_connections: 1024,
            // A small deployment's model server answers a few requests at a time; 32 runs
            // waiting on it is already a queue, and bounds what runs whose clients left hold.
            max_agent_runs: 32,
            // A tenth of the disk: time to free space on a small volume (2.4 MB of a 24 MB
            // one is some hundreds of appends), and on a large one, time to notice.
            disk_warning_free_percent: 10,
            memory_resident_budget: memlayer_memory::DEFAULT_RESIDENT_MEMORIES,
            node_id: None,
        }
    }
}

/// Shared state of the router. Cheap to clone: one reference count, however many parts it
/// has (axum clones it for every extractor and middleware of every request, and cloning each
/// part's own handles showed in the append path's profile).
#[derive(Clone)]
pub struct AppState {
    parts: Arc<Parts>,
}

struct Parts {
    store: Store,
    recall: Recall,
    contexts: ContextBuilder,
    erasure: Coordinator,
    memories: LongTermMemory,
    agent: Agent,
    config: ServerConfig,
    metrics: Arc<Metrics>,
    rate_limiter: Option<KeyRateLimiter>,
}

impl AppState {
    /// State serving `store`, searched through `recall` (which must index that store), with
    /// `config`. Fails if the store's eraser was taken already.
    pub fn new(store: Store, recall: Recall, config: ServerConfig) -> Result<Self, MemoryError> {
        let memories = LongTermMemory::open(
            store.clone(),
            recall.embedder().clone(),
            config.memory_resident_budget,
        );
        memories.follow(&recall);
        let mut contexts =
            ContextBuilder::new(store.clone(), recall.clone(), config.token_encoding)
                .with_memories(memories.clone());
        if let Some(model) = &config.summarizer_model {
            contexts = contexts.with_summarizer(Arc::new(LlmSummarizer::new(model.clone())));
        }
        let erasure = Coordinator::new(
            store.take_eraser()?,
            recall.clone(),
            memories.clone(),
            contexts.fact_cache().clone(),
            config
                .node_id
                .clone()
                .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string()),
        );
        let agent = Agent::new(
            contexts.clone(),
            Tools::new(erasure.clone(), memories.clone()).with_forget_wait(config.erasure_wait()),
            config.agent_model.clone(),
            config.token_encoding,
            crate::api::tools::render,
            config.max_agent_runs,
        );
        let parts = Parts {
            erasure,
            memories,
            agent,
            store,
            recall,
            contexts,
            rate_limiter: config.rate_limit.map(KeyRateLimiter::new),
            config,
            metrics: Arc::new(Metrics::new()),
        };
        Ok(Self {
            parts: Arc::new(parts),
        })
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.parts.store
    }

    /// Hybrid recall over the store's messages.
    pub fn recall(&self) -> &Recall {
        &self.parts.recall
    }

    /// Runs erasures.
    pub fn erasure(&self) -> &Coordinator {
        &self.parts.erasure
    }

    /// Long-term memories.
    pub fn memories(&self) -> &LongTermMemory {
        &self.parts.memories
    }

    /// Runs agents and executes the memory tools.
    pub fn agent(&self) -> &Agent {
        &self.parts.agent
    }

    /// Builds each turn's context.
    pub fn contexts(&self) -> &ContextBuilder {
        &self.parts.contexts
    }

    /// The settings.
    pub fn config(&self) -> &ServerConfig {
        &self.parts.config
    }

    /// The per-key rate limiter, if keys are limited.
    pub(crate) fn rate_limiter(&self) -> Option<&KeyRateLimiter> {
        self.parts.rate_limiter.as_ref()
    }

    /// The HTTP metrics this state's routers record.
    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        &self.parts.metrics
    }
}
