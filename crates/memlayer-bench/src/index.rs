//! `index`: the vector index on real all-MiniLM-L6-v2 embeddings of chat
//! text, HNSW side by side with the exact scan in the same run.
//!
//! For each corpus size it builds a [`VectorIndex`] with the default configuration through
//! `insert_batch`, answers generated questions with `search_exact` (the truth) and `search`,
//! and reports recall@10, queries per second on one and two threads, latency percentiles,
//! then saves a snapshot and times `load` followed by `build_graph`, and the peak memory of a
//! process that only loads it. A small table compares
//! the two searches around the default HNSW threshold, where the choice between them is made.
//!
//! The synthetic vectors of `crates/memlayer-index/benches` are quick but only stand-ins;
//! HNSW recall depends on the data's shape, so the figures that set the index's defaults
//! come from here. Embedding is the slow part, so vectors are cached under the target
//! directory (see `vectors`).

pub(crate) mod erase;
mod measure;
mod vectors;

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use memlayer_embed::{Assets, Embedder, EmbedderOptions, ModelIdentity};
use memlayer_index::{VectorConfig, VectorIndex};
use serde::{Deserialize, Serialize};

use crate::corpus::chat;
use crate::report::{self, load_average};
use measure::{Hits, ROUNDS, THREADS, Timing};

/// Neighbours per query, as in the recall@10.
const K: usize = 10;
/// The target, for 100,000 vectors.
const TARGET_RECALL: f64 = 0.98;
const TARGET_QPS: f64 = 2_000.0;
/// The ef_search values reported. The default is searched on the graph built after
/// `insert_batch`, each other value on the index a `load` of its snapshot gives (the graph
/// comes back with it, searched with the loaded configuration's ef_search); the loads are
/// the ones timed.
const EF_SEARCH: [usize; 3] = [32, 64, 128];
/// Sizes around the default HNSW threshold (5,000) at which both searches are compared on a
/// prefix of the smallest corpus.
const CROSSOVER: [usize; 4] = [1_000, 2_000, 5_000, 8_000];

/// One corpus, embedded.
struct Corpus {
    size: usize,
    distinct: usize,
    mean_words: f64,
    /// Questions whose text is also a message of this corpus.
    questions_in_corpus: usize,
    embedded: vectors::Embedded,
}

/// Everything measured at one corpus size.
struct SizeResult {
    build: Duration,
    has_graph: bool,
    exact: Timing,
    /// `(ef_search, timing)` in ef order; empty when the index is too small for a graph.
    hnsw: Vec<(usize, Timing)>,
    /// What the index's quantization costs: both searches against the f32 vectors.
    against_f32: AgainstF32,
    save: Duration,
    snapshot_bytes: u64,
    /// One vector erased as `Recall::forget` erases it under the index's write lock.
    erase: Erase,
    loads: Vec<Duration>,
    loaded_alone: LoadedAlone,
}

/// Recall@K (plain, with ties) against the exact top K of the f32 vectors as embedded,
/// before the index quantized them.
struct AgainstF32 {
    exact: (f64, f64),
    /// At the default ef_search, with a graph.
    hnsw: Option<(f64, f64)>,
}

/// An erasure of one vector: `remove` and `unlink_removed`, what searches wait for.
struct Erase {
    elapsed: Duration,
    /// Whether the index still searched its graph right after.
    has_graph: bool,
    /// The search right after, on every query, with its `ef_search`.
    search: Option<(usize, Timing)>,
}

/// Both searches at one size near the threshold, graph forced.
struct CrossoverRow {
    size: usize,
    build: Duration,
    exact: Timing,
    hnsw: Timing,
}

pub(crate) fn run(
    root: &Path,
    assets: &Assets,
    target_dir: &Path,
    sizes: &[usize],
    queries: usize,
) -> anyhow::Result<()> {
    let mut sizes = sizes.to_vec();
    sizes.sort_unstable();
    sizes.dedup();
    ensure!(
        sizes.first().is_some_and(|&size| size >= K),
        "give at least one size, each at least {K}"
    );
    ensure!(queries > 0, "give at least one query");
    let dir = target_dir.join("bench-index");
    fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    let load_before = load_average()?;

    // Everything is embedded before anything is measured, so the model's threads are idle
    // (and shut down) while the index is timed.
    let embedder = open_embedder(assets)?;
    let identity = embedder.identity().clone();
    let questions = chat::questions(queries);
    let query_vectors = vectors::load_or_embed(&embedder, &questions, &dir, "queries")?;
    let mut corpora = Vec::new();
    for &size in &sizes {
        let messages = chat::messages(size);
        let embedded = vectors::load_or_embed(&embedder, &messages, &dir, "embeddings")?;
        corpora.push(Corpus::new(&messages, &questions, embedded));
    }
    embedder.shutdown();

    let query_refs: Vec<&[f32]> = query_vectors
        .vectors
        .chunks_exact(identity.dimension)
        .collect();
    let crossover = crossover(&corpora[0], &query_refs, identity.dimension)?;
    let mut results = Vec::new();
    for corpus in &corpora {
        results.push(measure_size(corpus, &query_refs, identity.dimension, &dir)?);
    }
    let load_after = load_average()?;

    print_header(
        &identity,
        &questions,
        &query_vectors.path,
        root,
        [load_before, load_after],
    )?;
    for (corpus, result) in corpora.iter().zip(&results) {
        print_size(corpus, result, root);
    }
    print_crossover(&crossover, corpora[0].size);
    Ok(())
}

/// The embedder the corpora are embedded with, without a cache: every text is embedded
/// once, and a cache would only hold memory.
fn open_embedder(assets: &Assets) -> anyhow::Result<Embedder> {
    Ok(Embedder::open(
        assets,
        EmbedderOptions {
            cache_capacity: 0,
            ..EmbedderOptions::default()
        },
    )?)
}

/// The vectors of the first `size` chat messages and of `queries` questions, in `dir`'s cache
/// or embedded into it, and their dimension.
pub(crate) fn embedded_corpus(
    assets: &Assets,
    dir: &Path,
    size: usize,
    queries: usize,
) -> anyhow::Result<(Vec<f32>, Vec<f32>, usize)> {
    fs::create_dir_all(dir).with_context(|| format!("could not create {}", dir.display()))?;
    let embedder = open_embedder(assets)?;
    let dimension = embedder.identity().dimension;
    let questions = vectors::load_or_embed(&embedder, &chat::questions(queries), dir, "queries")?;
    let corpus = vectors::load_or_embed(&embedder, &chat::messages(size), dir, "embeddings")?;
    embedder.shutdown();
    Ok((corpus.vectors, questions.vectors, dimension))
}

impl Corpus {
    fn new(messages: &[String], questions: &[String], embedded: vectors::Embedded) -> Self {
        let distinct: HashSet<&str> = messages.iter().map(String::as_str).collect();
        let words: usize = messages.iter().map(|m| m.split_whitespace().count()).sum();
        Self {
            size: messages.len(),
            distinct: distinct.len(),
            mean_words: words as f64 / messages.len() as f64,
            questions_in_corpus: questions
                .iter()
                .filter(|q| distinct.contains(q.as_str()))
                .count(),
            embedded,
        }
    }

    fn vectors(&self, dimension: usize) -> impl Iterator<Item = (u64, &[f32])> {
        (0u64..).zip(self.embedded.vectors.chunks_exact(dimension))
    }
}

fn measure_size(
    corpus: &Corpus,
    queries: &[&[f32]],
    dimension: usize,
    dir: &Path,
) -> anyhow::Result<SizeResult> {
    let size = corpus.size;
    eprintln!("memlayer-bench: {size} vectors: insert_batch");
    let start = Instant::now();
    let mut index = VectorIndex::new(VectorConfig::new(dimension))?;
    index.insert_batch(corpus.vectors(dimension))?;
    index.build_graph();
    let build = start.elapsed();
    let has_graph = index.has_graph();
    let default_ef = index.config().ef_search;

    eprintln!("memlayer-bench: {size} vectors: search_exact");
    let exact = measure::time(queries, |query| index.search_exact(query, K, None))?;
    let mut hnsw = Vec::new();
    if has_graph {
        eprintln!("memlayer-bench: {size} vectors: search, ef_search {default_ef}");
        let timing = measure::time(queries, |query| index.search(query, K, None))?;
        hnsw.push((default_ef, timing));
    }
    eprintln!("memlayer-bench: {size} vectors: brute force over the f32 vectors");
    let against_f32 = AgainstF32::measure(corpus, queries, dimension, &exact, hnsw.first());

    let snapshot = dir.join(format!("snapshot-{size}.idx"));
    let start = Instant::now();
    index.save(&snapshot, 0)?;
    let save = start.elapsed();
    let snapshot_bytes = fs::metadata(&snapshot)?.len();
    let erase = erase_one(&mut index, queries)?;
    drop(index);

    // Without a graph ef_search changes nothing: one load is timed, with the defaults.
    let load_efs: Vec<usize> = if has_graph {
        EF_SEARCH
            .into_iter()
            .filter(|&ef| ef != default_ef)
            .collect()
    } else {
        vec![default_ef]
    };
    let mut loads = Vec::new();
    for ef in load_efs {
        eprintln!("memlayer-bench: {size} vectors: load with ef_search {ef}");
        let mut config = VectorConfig::new(dimension);
        config.ef_search = ef;
        let start = Instant::now();
        let (mut loaded, _) = VectorIndex::load(&snapshot, config)?;
        // Timed with the graph, as the server has it once its builder is done.
        loaded.build_graph();
        loads.push(start.elapsed());
        ensure!(
            loaded.len() == size && loaded.has_graph() == has_graph,
            "the loaded index differs: {loaded:?}"
        );
        if has_graph {
            eprintln!("memlayer-bench: {size} vectors: search, ef_search {ef}");
            let timing = measure::time(queries, |query| loaded.search(query, K, None))?;
            hnsw.push((ef, timing));
        }
    }
    hnsw.sort_by_key(|&(ef, _)| ef);
    eprintln!("memlayer-bench: {size} vectors: load in a process of its own");
    let loaded_alone = load_in_child(&snapshot, dimension)?;
    // The snapshot is as large as the vectors; nothing reads it again.
    fs::remove_file(&snapshot)?;
    Ok(SizeResult {
        build,
        has_graph,
        exact,
        hnsw,
        against_f32,
        save,
        snapshot_bytes,
        erase,
        loads,
        loaded_alone,
    })
}

impl AgainstF32 {
    fn measure(
        corpus: &Corpus,
        queries: &[&[f32]],
        dimension: usize,
        exact: &Timing,
        hnsw: Option<&(usize, Timing)>,
    ) -> Self {
        let vectors: Vec<&[f32]> = corpus.vectors(dimension).map(|(_, v)| v).collect();
        let f32_dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        let truth: Vec<Hits> = queries
            .iter()
            .map(|query| {
                let mut scored: Hits = (0u64..)
                    .zip(&vectors)
                    .map(|(id, vector)| (id, f32_dot(query, vector)))
                    .collect();
                scored.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                scored.truncate(K);
                scored
            })
            .collect();
        // Found ids scored in f32 again, so that a duplicate of a truth's vector ties it.
        let against = |timing: &Timing| {
            let rescored: Vec<Hits> = timing
                .hits
                .iter()
                .zip(queries)
                .map(|(hits, query)| {
                    hits.iter()
                        .map(|&(id, _)| (id, f32_dot(query, vectors[id as usize])))
                        .collect()
                })
                .collect();
            (
                measure::recall(&truth, &rescored),
                measure::recall_with_ties(&truth, &rescored),
            )
        };
        Self {
            exact: against(exact),
            hnsw: hnsw.map(|(_, timing)| against(timing)),
        }
    }
}

/// Erases the middle vector of `index` as `Recall::forget` does under the index's write lock
/// (`remove`, then `unlink_removed`), timed, then times the default search on what is left.
fn erase_one(index: &mut VectorIndex, queries: &[&[f32]]) -> anyhow::Result<Erase> {
    let size = index.len();
    let erased = (size / 2) as u64;
    eprintln!("memlayer-bench: {size} vectors: erase one, then search");
    let start = Instant::now();
    ensure!(index.remove(erased), "vector {erased} was not indexed");
    index.unlink_removed();
    let elapsed = start.elapsed();
    ensure!(index.len() == size - 1, "the erasure left {index:?}");
    let has_graph = index.has_graph();
    let search = if has_graph {
        let timing = measure::time(queries, |query| index.search(query, K, None))?;
        Some((index.config().ef_search, timing))
    } else {
        None
    };
    Ok(Erase {
        elapsed,
        has_graph,
        search,
    })
}

/// What a process that only loads a snapshot holds (`snapshot-load`'s line).
#[derive(Serialize, Deserialize)]
struct LoadedAlone {
    /// Before the load: the process and its libraries.
    rss_before_kib: u64,
    /// The most it held while loading.
    peak_kib: u64,
    /// Once loaded.
    rss_after_kib: u64,
}

/// Loads `snapshot` in a child process (this binary's `snapshot-load`), whose peak resident
/// memory is the load's own: in this process the build before it set the peak.
fn load_in_child(snapshot: &Path, dimension: usize) -> anyhow::Result<LoadedAlone> {
    let output = Command::new(std::env::current_exe()?)
        .arg("snapshot-load")
        .arg("--snapshot")
        .arg(snapshot)
        .arg("--dimension")
        .arg(dimension.to_string())
        .output()
        .context("could not run `memlayer-bench snapshot-load`")?;
    ensure!(
        output.status.success(),
        "`memlayer-bench snapshot-load` failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(serde_json::from_slice(&output.stdout)?)
}

/// `snapshot-load`: loads `snapshot` (graph included) and prints [`LoadedAlone`].
pub(crate) fn load_alone(snapshot: &Path, dimension: usize) -> anyhow::Result<()> {
    let rss_before_kib = report::own_status_kib("VmRSS")?;
    let (loaded, _) = VectorIndex::load(snapshot, VectorConfig::new(dimension))?;
    let loaded_alone = LoadedAlone {
        rss_before_kib,
        peak_kib: report::own_status_kib("VmHWM")?,
        rss_after_kib: report::own_status_kib("VmRSS")?,
    };
    drop(loaded);
    println!("{}", serde_json::to_string(&loaded_alone)?);
    Ok(())
}

/// Both searches at the `CROSSOVER` sizes below the smallest corpus, on its prefixes.
fn crossover(
    corpus: &Corpus,
    queries: &[&[f32]],
    dimension: usize,
) -> anyhow::Result<Vec<CrossoverRow>> {
    let mut rows = Vec::new();
    for size in CROSSOVER.into_iter().filter(|&size| size < corpus.size) {
        eprintln!("memlayer-bench: crossover at {size} vectors");
        let mut config = VectorConfig::new(dimension);
        // A threshold of zero gives every index a graph, so both searches run on the same
        // vectors at sizes where the default would only scan.
        config.hnsw_threshold = 0;
        let start = Instant::now();
        let mut index = VectorIndex::new(config)?;
        index.insert_batch(corpus.vectors(dimension).take(size))?;
        index.build_graph();
        let build = start.elapsed();
        let exact = measure::time(queries, |query| index.search_exact(query, K, None))?;
        let hnsw = measure::time(queries, |query| index.search(query, K, None))?;
        rows.push(CrossoverRow {
            size,
            build,
            exact,
            hnsw,
        });
    }
    Ok(rows)
}

fn print_header(
    identity: &ModelIdentity,
    questions: &[String],
    query_path: &Path,
    root: &Path,
    [load_before, load_after]: [String; 2],
) -> anyhow::Result<()> {
    let distinct: HashSet<&String> = questions.iter().collect();
    report::print_run_header(
        "memlayer vector index benchmark",
        &[load_before, load_after],
    )?;
    println!(
        "- model: {}, `model.onnx` sha256 {}, {} dimensions; `Embedder` default options, \
         cache off",
        identity.name, identity.sha256, identity.dimension
    );
    println!(
        "- queries: {} generated questions ({} distinct) from the corpus topics' question \
         templates, which no message uses; vectors in `{}`",
        questions.len(),
        distinct.len(),
        relative(query_path, root).display()
    );
    println!(
        "- index: `VectorConfig::new({})` defaults (HNSW above 5,000 vectors, M 16, \
         ef_construction 200, ef_search 64), every vector in one `insert_batch`; top {K}, no \
         filter. ef_search 64 runs on the graph `insert_batch` built, the others on the \
         same graph as their `load` of the snapshot brings it back",
        identity.dimension
    );
    println!(
        "- timing: best of {ROUNDS} rounds; 1 thread: one query after another; {THREADS} \
         threads: the queries split between them (`std::thread::scope`); p50 / p99: per \
         query, 1 thread"
    );
    println!(
        "- recall@{K}: share of the exact top {K} (`search_exact`) that `search` found, mean \
         over queries; \"with ties\" also counts a hit scoring at least the exact {K}th score \
         (duplicate texts have identical vectors)"
    );
    println!(
        "- target from the issue, for 100,000 vectors: recall@{K} ≥ {TARGET_RECALL} at ≥ {} \
         queries/s, judged on recall@{K} with ties and {THREADS} threads",
        grouped(TARGET_QPS as usize)
    );
    Ok(())
}

fn print_size(corpus: &Corpus, result: &SizeResult, root: &Path) {
    let size = corpus.size;
    let cached = relative(&corpus.embedded.path, root);
    let embedding = match corpus.embedded.embedding {
        Some((embedded, elapsed)) if embedded < size => format!(
            "of the first {} from a smaller cache, of the other {} embedded in {:.1} s ({:.0} \
             texts/s); all cached in `{}`",
            grouped(size - embedded),
            grouped(embedded),
            elapsed.as_secs_f64(),
            embedded as f64 / elapsed.as_secs_f64(),
            cached.display()
        ),
        Some((_, elapsed)) => format!(
            "embedded in {:.1} s ({:.0} texts/s), cached in `{}`",
            elapsed.as_secs_f64(),
            size as f64 / elapsed.as_secs_f64(),
            cached.display()
        ),
        None => format!("from the cache `{}`", cached.display()),
    };
    let loads: Vec<String> = result
        .loads
        .iter()
        .map(|load| format!("{:.2} s", load.as_secs_f64()))
        .collect();
    println!();
    println!("### {} vectors", grouped(size));
    println!();
    println!(
        "- corpus: {} generated chat messages, {} distinct ({:.2}%), mean {:.1} words; {} \
         question(s) identical to a message; vectors {embedding}",
        grouped(size),
        grouped(corpus.distinct),
        100.0 * corpus.distinct as f64 / size as f64,
        corpus.mean_words,
        corpus.questions_in_corpus
    );
    println!(
        "- build: `insert_batch` of {} vectors in {:.2} s ({:.0} vectors/s); HNSW graph: {}",
        grouped(size),
        result.build.as_secs_f64(),
        size as f64 / result.build.as_secs_f64(),
        if result.has_graph {
            "yes"
        } else {
            "no (at or below the threshold)"
        }
    );
    println!(
        "- snapshot: `save` {:.2} s, file {:.1} MB ({} bytes); `load`, which reads and verifies, \
         then `build_graph`: {}",
        result.save.as_secs_f64(),
        result.snapshot_bytes as f64 / 1e6,
        grouped(result.snapshot_bytes as usize),
        loads.join(", ")
    );
    println!(
        "- erasing one vector (`remove` and `unlink_removed`, which `Recall::forget` runs under \
         the index's write lock, so searches wait for it): {:.1} ms; the graph {}",
        result.erase.elapsed.as_secs_f64() * 1e3,
        if result.erase.has_graph {
            "served the next search (the last table row)"
        } else {
            "was gone after it"
        }
    );
    let (exact, exact_ties) = result.against_f32.exact;
    let hnsw = match result.against_f32.hnsw {
        Some((recall, ties)) => format!(", HNSW at the default ef_search {recall:.4} ({ties:.4})"),
        None => String::new(),
    };
    println!(
        "- against the exact top {K} of the f32 vectors (brute force, before the index \
         quantizes them): recall@{K} (with ties) of the exact scan {exact:.4} \
         ({exact_ties:.4}){hnsw}"
    );
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "- a process that only loads the snapshot: RSS {:.0} MiB before, peak {:.0} MiB while \
         loading, {:.0} MiB once loaded",
        mib(result.loaded_alone.rss_before_kib),
        mib(result.loaded_alone.peak_kib),
        mib(result.loaded_alone.rss_after_kib),
    );
    println!();
    println!(
        "| search | ef_search | recall@{K} | recall@{K} with ties | queries/s, 1 thread | \
         queries/s, {THREADS} threads | p50 µs | p99 µs | meets target |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
    let truth = &result.exact.hits;
    println!("{}", row("exact scan", "–", truth, &result.exact));
    if !result.has_graph {
        println!("| `search` scans exactly at this size | | | | | | | | |");
    }
    for (ef, timing) in &result.hnsw {
        println!("{}", row("HNSW", &ef.to_string(), truth, timing));
    }
    if let Some((ef, timing)) = &result.erase.search {
        // Judged against the answers before the erasure, which may hold the erased vector.
        let ef = format!("{ef} after erasing one");
        println!("{}", row("HNSW", &ef, truth, timing));
    }
}

fn row(search: &str, ef: &str, truth: &[Hits], timing: &Timing) -> String {
    let recall = measure::recall(truth, &timing.hits);
    // The target is judged with ties: the corpus holds duplicate texts, and returning one
    // of two identical vectors instead of the other is not a miss.
    let with_ties = measure::recall_with_ties(truth, &timing.hits);
    let threads_qps = timing.queries_per_second(timing.threads);
    let verdict = match (with_ties >= TARGET_RECALL, threads_qps >= TARGET_QPS) {
        (true, true) => "yes",
        (false, true) => "no: recall",
        (true, false) => "no: speed",
        (false, false) => "no: recall and speed",
    };
    format!(
        "| {search} | {ef} | {recall:.4} | {with_ties:.4} | {:.0} | {threads_qps:.0} | {:.0} | \
         {:.0} | {verdict} |",
        timing.queries_per_second(timing.one_thread),
        timing.latency_us(50.0),
        timing.latency_us(99.0)
    )
}

fn print_crossover(rows: &[CrossoverRow], corpus_size: usize) {
    if rows.is_empty() {
        return;
    }
    println!();
    println!("### Exact scan against HNSW around the threshold");
    println!();
    println!(
        "Prefixes of the {}-message corpus, graph forced (`hnsw_threshold` 0), ef_search 64, \
         same queries; mean µs per query on 1 thread.",
        grouped(corpus_size)
    );
    println!();
    println!(
        "| vectors | build s | exact µs | HNSW µs | exact queries/s, {THREADS} threads | HNSW \
         queries/s, {THREADS} threads | HNSW recall@{K} |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for row in rows {
        let mean_us = |timing: &Timing| 1e6 / timing.queries_per_second(timing.one_thread);
        println!(
            "| {} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} | {:.4} |",
            grouped(row.size),
            row.build.as_secs_f64(),
            mean_us(&row.exact),
            mean_us(&row.hnsw),
            row.exact.queries_per_second(row.exact.threads),
            row.hnsw.queries_per_second(row.hnsw.threads),
            measure::recall(&row.exact.hits, &row.hnsw.hits)
        );
    }
}

/// `path` relative to the workspace root when it lies inside it, for shorter report lines.
fn relative(path: &Path, root: &Path) -> PathBuf {
    path.strip_prefix(root).unwrap_or(path).to_path_buf()
}

/// `n` with thousands separated by commas, as the report's prose writes sizes.
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000), "1,000");
        assert_eq!(grouped(100_000), "100,000");
        assert_eq!(grouped(1_234_567), "1,234,567");
    }
}
