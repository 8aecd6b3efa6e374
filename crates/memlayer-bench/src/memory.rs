//! `memory`: the latency of recalling long-term memories
//! (`LongTermMemory::recall`, behind `POST /v1/memories/search`) when one user has 10,000
//! memories and when many users share the store. The goal is p95 < 10 ms without the
//! query's embedding.
//!
//! Embedding a million texts with the real model would take hours here, so the memories are
//! stored with precomputed vectors: each is the real embedding of its topic (one of
//! [`TOPICS`], embedded once) plus seeded noise, so memories of one topic cluster as real ones
//! do. They are written through `Store::put_memory` (many at once, so the store's group commit
//! batches them). `LongTermMemory::open` loads nothing; the first recall of a user loads their
//! partition from the store, then `LongTermMemory::build_graphs` builds its graph (the server
//! builds them in the background); both times are reported. After the timed recalls, one
//! recall for every user in turn loads each partition, evicting the least recently used past
//! the default budget: that sweep's time, the resident figures and the RSS are reported, and
//! the latency of user 0's recalls (query vector cached) made one after another beside the
//! sweep: a load must not hold up the recalls of users already resident.
//! Everything is generated from a fixed seed.
//!
//! Each iteration asks a question never asked before (its embedding is in the time), then the
//! same question again: the embedder's content-hash cache holds its vector, so the second time
//! is recall with a precomputed query vector.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use memlayer_embed::{Assets, Embedder, EmbedderOptions};
use memlayer_memory::{DEFAULT_RESIDENT_MEMORIES, LongTermMemory, MemoryQuery, Residency};
use memlayer_store::{Access, Memory, MemoryKind, Store, Timestamp};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinSet;

use crate::corpus::memories::{self, TOPICS, questions};
use crate::report::{self, command_line, load_average, percentile, runtime};

const TENANT: &str = "default";
const AGENT: &str = "assistant";
/// Memories per user: the "10k memories for one user".
pub(crate) const PER_USER: usize = 10_000;
/// The goal for the p95 of recall without the query's embedding.
const TARGET: Duration = Duration::from_millis(10);
/// Memories written at once: the store's group commit puts up to 512 jobs in one commit.
const IN_FLIGHT: usize = 512;
/// Memories recalled per question, as an agent asks for them.
const K: usize = 5;
/// Untimed recalls before the measurement.
const WARM_UP: usize = 20;
const SEED: u64 = 5;
/// Norm of the noise added to a topic's unit vector: memories of one topic end up at a
/// cosine of about 0.9 to it and 0.8 to each other, as paraphrases do with all-MiniLM-L6-v2.
const NOISE_NORM: f32 = 0.5;

/// One store size's results.
struct Measured {
    memories: usize,
    users: usize,
    load: Duration,
    file_bytes: u64,
    open: Duration,
    /// The first recall of user 0: its partition loaded from the store.
    first_recall: Duration,
    /// Partitions given a graph after the open, and how long that took.
    graphs: usize,
    graphs_time: Duration,
    rss_before: u64,
    rss_after: u64,
    with_embedding: Vec<Duration>,
    without_embedding: Vec<Duration>,
    /// One recall for every user in turn, and what is resident after it.
    sweep: Duration,
    /// User 0's recalls during the sweep, sorted.
    beside_sweep: Vec<Duration>,
    residency: Residency,
    rss_after_sweep: u64,
}

pub(crate) fn run(assets: &Assets, sizes: &[usize], queries: usize) -> anyhow::Result<()> {
    ensure!(queries > 0, "give at least one query");
    let total_questions = memories::QUESTIONS;
    ensure!(
        queries + WARM_UP <= total_questions,
        "at most {} queries: there are {total_questions} distinct questions",
        total_questions - WARM_UP
    );
    let load_before = load_average()?;
    let runtime = runtime()?;
    let embedder = Embedder::open(assets, EmbedderOptions::default())?;
    let result = (|| {
        let centres = embedder.embed_blocking(TENANT, &TOPICS)?;
        let mut results = Vec::new();
        for &size in sizes {
            eprintln!("memlayer-bench: {size} memories");
            // Every size asks the same questions: without this, the next size would find
            // the "new" questions' vectors in the embedder's cache.
            embedder.clear_cache(TENANT);
            results.push(runtime.block_on(measure(&embedder, &centres, size, queries))?);
        }
        anyhow::Ok(results)
    })();
    embedder.shutdown();
    let results = result?;
    let load_after = load_average()?;
    println!("{}", report(&results, queries, [load_before, load_after]));
    Ok(())
}

async fn measure(
    embedder: &Embedder,
    centres: &[Vec<f32>],
    size: usize,
    queries: usize,
) -> anyhow::Result<Measured> {
    let dir = tempfile::Builder::new()
        .prefix("memlayer-bench-memory-")
        .tempdir()
        .context("could not create a temporary directory for the store")?;
    let path = dir.path().join("memlayer.redb");
    let store = Store::open(&path).context("cannot open the store")?;
    let users = size.div_ceil(PER_USER);
    let start = Instant::now();
    load(&store, centres, size, users).await?;
    let load_time = start.elapsed();
    let file_bytes = std::fs::metadata(&path)?.len();

    let rss_before = report::own_status_kib("VmRSS")? * 1024;
    let start = Instant::now();
    let memories = LongTermMemory::open(store.clone(), embedder.clone(), DEFAULT_RESIDENT_MEMORIES);
    let open = start.elapsed();
    let questions = questions(WARM_UP + queries);
    let query = |user: usize, text: &str| MemoryQuery {
        tenant: TENANT.into(),
        user_id: user_id(user),
        agent_id: Some(AGENT.into()),
        query: text.to_owned(),
        k: K,
        kinds: None,
        tags: None,
    };
    let start = Instant::now();
    memories.recall(query(0, &questions[0])).await?;
    let first_recall = start.elapsed();
    // What the server's background builder does after the start; recall is timed with
    // every graph in place.
    let start = Instant::now();
    let graphs = memories.build_graphs();
    let graphs_time = start.elapsed();
    let rss_after = report::own_status_kib("VmRSS")? * 1024;

    for question in &questions[..WARM_UP] {
        let hits = memories.recall(query(0, question)).await?;
        ensure!(
            hits.len() == K,
            "recall found {} of {K} memories",
            hits.len()
        );
        ensure!(
            hits.iter().all(|hit| hit.memory.user_id == user_id(0)),
            "recall answered with another user's memory"
        );
    }
    let mut with_embedding = Vec::with_capacity(queries);
    let mut without_embedding = Vec::with_capacity(queries);
    for question in &questions[WARM_UP..] {
        for series in [&mut with_embedding, &mut without_embedding] {
            let start = Instant::now();
            let hits = memories.recall(query(0, question)).await?;
            series.push(start.elapsed());
            ensure!(
                hits.len() == K,
                "recall found {} of {K} memories",
                hits.len()
            );
        }
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let beside = {
        let (memories, question) = (memories.clone(), query(0, &questions[0]));
        tokio::spawn(async move {
            let mut latencies = Vec::new();
            while !*stopped.borrow() {
                let start = Instant::now();
                memories.recall(question.clone()).await?;
                latencies.push(start.elapsed());
            }
            anyhow::Ok(latencies)
        })
    };
    let start = Instant::now();
    for user in 0..users {
        let hits = memories.recall(query(user, &questions[0])).await?;
        ensure!(
            hits.iter().all(|hit| hit.memory.user_id == user_id(user)),
            "recall answered with another user's memory"
        );
    }
    let sweep = start.elapsed();
    stop.send_replace(true);
    let mut beside_sweep = beside.await??;
    beside_sweep.sort_unstable();
    let residency = memories.residency();
    let rss_after_sweep = report::own_status_kib("VmRSS")? * 1024;
    drop(memories);
    store.shutdown();
    with_embedding.sort_unstable();
    without_embedding.sort_unstable();
    Ok(Measured {
        memories: size,
        users,
        load: load_time,
        file_bytes,
        open,
        first_recall,
        graphs,
        graphs_time,
        rss_before,
        rss_after,
        with_embedding,
        without_embedding,
        sweep,
        beside_sweep,
        residency,
        rss_after_sweep,
    })
}

fn user_id(user: usize) -> String {
    format!("user-{user:06}")
}

/// Writes `size` memories spread over `users` users (interleaved, as users remember things
/// over the same days), `IN_FLIGHT` at a time.
pub(crate) async fn load(
    store: &Store,
    centres: &[Vec<f32>],
    size: usize,
    users: usize,
) -> anyhow::Result<()> {
    let mut rng = StdRng::seed_from_u64(SEED);
    let start_time: u64 = 1_790_000_000_000_000;
    let mut written = 0;
    let mut reported = Instant::now();
    while written < size {
        let mut batch = JoinSet::new();
        for i in written..(written + IN_FLIGHT).min(size) {
            let memory = memory(&mut rng, centres, i, users, start_time);
            let store = store.clone();
            let sources = Access::tenant_wide(&*memory.tenant);
            batch.spawn(async move { store.memories().put_memory(memory, &sources).await });
        }
        while let Some(result) = batch.join_next().await {
            result.context("a write task panicked")??;
            written += 1;
        }
        if reported.elapsed() > Duration::from_secs(10) {
            eprintln!("memlayer-bench: {written} of {size} memories stored");
            reported = Instant::now();
        }
    }
    Ok(())
}

/// The `i`th memory: its user, scope, kind, text and vector follow from `i` and the seeded
/// generator.
fn memory(
    rng: &mut StdRng,
    centres: &[Vec<f32>],
    i: usize,
    users: usize,
    start_time: u64,
) -> Memory {
    let (topic, text) = memories::statement(rng);
    let vector = near(rng, &centres[topic]);
    let kinds = [
        MemoryKind::Fact,
        MemoryKind::Preference,
        MemoryKind::Relationship,
        MemoryKind::Instruction,
    ];
    let at = Timestamp::from_micros(start_time + i as u64 * 60_000_000);
    Memory {
        id: 0,
        revision: 0,
        tenant: TENANT.into(),
        user_id: user_id(i % users),
        // Half belong to the agent, half to every agent of the user.
        agent_id: rng.random_bool(0.5).then(|| AGENT.to_owned()),
        text,
        kind: kinds[rng.random_range(0..kinds.len())],
        tags: Vec::new(),
        source: None,
        created_at: at,
        updated_at: at,
        history: Vec::new(),
        vector,
        key: None,
    }
}

/// A unit vector at a cosine of about 0.9 to the unit vector `centre`: `centre` plus seeded
/// noise of norm about `NOISE_NORM`, normalised.
pub(crate) fn near(rng: &mut StdRng, centre: &[f32]) -> Vec<f32> {
    // Components uniform in ±1 have a variance of 1/3.
    let scale = NOISE_NORM / (centre.len() as f32 / 3.0).sqrt();
    let mut vector: Vec<f32> = centre
        .iter()
        .map(|c| c + scale * rng.random_range(-1.0f32..1.0))
        .collect();
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    for x in &mut vector {
        *x /= norm;
    }
    vector
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn report(results: &[Measured], queries: usize, load: [String; 2]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## Long-term memory recall\n");
    let _ = writeln!(
        out,
        "Command: `{}`. Load average {} before / {} after. {queries} questions \
         per size, each asked new (its embedding in the time) then again (its vector cached: \
         recall with a precomputed query vector); k {K}, asked by user 0's agent, which sees \
         all of that user's memories (half its own, half shared by every agent). Memories stored with \
         seeded vectors around real embeddings of {} topics. `LongTermMemory::open` (the \
         server's start) loads nothing; the first recall loads user 0's partition from the \
         store, then `LongTermMemory::build_graphs` builds the HNSW graph of the partitions \
         larger than 5,000 (the server's background builder; recall scans those partitions \
         until then), then the recalls are timed. Last, one recall for every user in turn \
         (the sweep) loads every partition, the least recently used leaving past the default \
         budget of {DEFAULT_RESIDENT_MEMORIES} resident memories, while user 0 recalls (its \
         query vector cached), one recall after another.\n",
        command_line(),
        load[0],
        load[1],
        TOPICS.len(),
    );
    let _ = writeln!(
        out,
        "| memories | users | store write s | file MiB | open s | first recall (load) ms | graphs built s | RSS before open → after graphs MiB | query | p50 ms | p95 ms | p99 ms | p95 target |"
    );
    let _ = writeln!(
        out,
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | --- |"
    );
    for result in results {
        for (what, samples, target) in [
            (
                "vector precomputed",
                &result.without_embedding,
                Some(TARGET),
            ),
            ("new: includes its embedding", &result.with_embedding, None),
        ] {
            let at = |p: f64| percentile(samples, p).map_or(f64::NAN, ms);
            let verdict = match target {
                Some(target) if percentile(samples, 95.0).is_some_and(|p95| p95 < target) => {
                    format!("< {:.0} ms: met", ms(target))
                }
                Some(target) => format!("< {:.0} ms: **missed**", ms(target)),
                None => "–".to_owned(),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {:.1} | {:.1} | {:.3} | {:.1} | {:.2} ({}) | {:.0} → {:.0} | {what} | {:.2} | {:.2} | {:.2} | {verdict} |",
                result.memories,
                result.users,
                result.load.as_secs_f64(),
                result.file_bytes as f64 / (1024.0 * 1024.0),
                result.open.as_secs_f64(),
                ms(result.first_recall),
                result.graphs_time.as_secs_f64(),
                result.graphs,
                result.rss_before as f64 / (1024.0 * 1024.0),
                result.rss_after as f64 / (1024.0 * 1024.0),
                at(50.0),
                at(95.0),
                at(99.0),
            );
        }
    }
    let _ = writeln!(
        out,
        "\n| memories | users | sweep s | loads | evictions | resident memories / partitions | RSS after sweep MiB | user 0 beside the sweep: recalls | p50 ms | p99 ms | max ms |\n| ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"
    );
    for result in results {
        let resident = &result.residency;
        let beside = &result.beside_sweep;
        let at = |p: f64| percentile(beside, p).map_or(f64::NAN, ms);
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {} | {} | {} / {} | {:.0} | {} | {:.2} | {:.2} | {:.2} |",
            result.memories,
            result.users,
            result.sweep.as_secs_f64(),
            resident.loads,
            resident.evictions,
            resident.memories,
            resident.partitions,
            result.rss_after_sweep as f64 / (1024.0 * 1024.0),
            beside.len(),
            at(50.0),
            at(99.0),
            beside.last().copied().map_or(f64::NAN, ms),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memories_are_repeatable_and_unit_length() {
        let centres = vec![vec![1.0f32 / (384f32).sqrt(); 384]; TOPICS.len()];
        let make = || {
            let mut rng = StdRng::seed_from_u64(SEED);
            (0..20)
                .map(|i| memory(&mut rng, &centres, i, 3, 0))
                .collect::<Vec<_>>()
        };
        let memories = make();
        assert_eq!(memories, make());
        for memory in &memories {
            let norm: f32 = memory.vector.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "{norm}");
        }
        assert_eq!(memories[4].user_id, user_id(1));
    }
}
