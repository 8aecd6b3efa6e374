//! `index-erase`: erasing single vectors from one index of a million (by default) vectors of
//! real chat embeddings, the size issue 18's erasure target names.
//!
//! The embedded corpus of `index` (100,000 generated chat messages, cached) is grown to the
//! size asked by copies of its vectors with uniform noise added (a copy is at cosine about
//! 0.95 of its source), so the graph has the real corpus's shape at a size no one embeds on a
//! benchmark machine. A graph of a million takes minutes to build, so the index is built once
//! and kept as a snapshot under the target directory; later runs load it, and the load is
//! timed. Then single vectors are erased as `Recall::forget` erases them under the index's
//! write lock (`remove`, then `unlink_removed`: what searches and appends wait for), each
//! timed; searches are timed before and after, and judged against the exact scan after.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use memlayer_embed::Assets;
use memlayer_index::{VectorConfig, VectorIndex};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{K, embedded_corpus, measure};
use crate::report::{self, load_average};

/// The real vectors: `index`'s largest corpus by default.
const REAL: usize = 100_000;

/// Half the width of the uniform noise added to each component of a copy. A component of
/// a 384-dimension unit vector is about 0.05; noise of ±0.03 puts a copy at cosine ≈ 0.95.
const NOISE: f32 = 0.03;

/// How the index came to be: loaded from the kept snapshot, or built and saved.
enum Origin {
    Loaded(Duration),
    Built { build: Duration, save: Duration },
}

pub(crate) fn run(
    assets: &Assets,
    target_dir: &Path,
    size: usize,
    erasures: usize,
    queries: usize,
) -> anyhow::Result<()> {
    ensure!(erasures > 0 && queries > 0, "erase and ask at least once");
    let load_before = load_average()?;
    let dir = target_dir.join("bench-index");
    let (corpus, questions, dimension) = embedded_corpus(assets, &dir, REAL.min(size), queries)?;
    let questions: Vec<&[f32]> = questions.chunks_exact(dimension).collect();

    let snapshot = dir.join(format!("grown-{size}.idx"));
    let (mut index, origin) = open_or_build(&snapshot, &corpus, dimension, size)?;
    ensure!(
        index.len() == size && index.has_graph(),
        "the grown index is not what was asked: {index:?}"
    );
    let rss_mib = report::own_status_kib("VmRSS")? as f64 / 1024.0;

    eprintln!("memlayer-bench: {size} vectors: search before erasing");
    let before = measure::time(&questions, |question| index.search(question, K, None))?;
    let mut erased = Vec::with_capacity(erasures);
    for n in 1..=erasures {
        let id = (n * size / (erasures + 1)) as u64;
        eprintln!("memlayer-bench: {size} vectors: erase {id}");
        let start = Instant::now();
        ensure!(index.remove(id), "vector {id} was not indexed");
        index.unlink_removed();
        erased.push(start.elapsed());
        ensure!(index.has_graph(), "the erasure left {index:?}");
    }
    eprintln!("memlayer-bench: {size} vectors: search after erasing, then the exact scan");
    let after = measure::time(&questions, |question| index.search(question, K, None))?;
    let exact = questions
        .iter()
        .map(|question| index.search_exact(question, K, None))
        .collect::<memlayer_index::Result<Vec<_>>>()?;
    // What the erasure receipt waits for after the lock is released: the snapshot rewritten
    // (under the read lock, which searches share). Written beside the kept one, then removed.
    let rewritten = dir.join(format!("grown-{size}.erased.idx"));
    let start = Instant::now();
    index.save(&rewritten, 0)?;
    let save_after = start.elapsed();
    fs::remove_file(&rewritten)?;
    let load_after = load_average()?;

    report::print_run_header(
        &format!(
            "memlayer vector index: erasing one vector of {}",
            super::grouped(size)
        ),
        &[load_before, load_after],
    )?;
    println!(
        "- index: {} vectors, the first {} real all-MiniLM-L6-v2 embeddings of `index`'s chat \
         corpus, the rest copies of them with uniform noise of ±{NOISE} per component \
         (renormalised); default configuration",
        super::grouped(size),
        super::grouped(corpus.len() / dimension)
    );
    match origin {
        Origin::Loaded(load) => println!(
            "- loaded from `{}` (kept from an earlier run) in {:.2} s, graph included",
            snapshot.display(),
            load.as_secs_f64()
        ),
        Origin::Built { build, save } => println!(
            "- built (`insert_batch`, `build_graph`) in {:.1} s and saved to `{}` in {:.2} s",
            build.as_secs_f64(),
            snapshot.display(),
            save.as_secs_f64()
        ),
    }
    println!("- resident memory of this process with the index: {rss_mib:.0} MiB");
    let ms = |d: &Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
    println!(
        "- {erasures} erasures of one vector each (`remove` and `unlink_removed`, which \
         `Recall::forget` runs under the index's write lock), ms: {}; the graph served every \
         search after each",
        erased.iter().map(ms).collect::<Vec<_>>().join(", ")
    );
    println!(
        "- the snapshot rewritten after them (what the erasure's receipt also waits for, under \
         the read lock): {:.2} s",
        save_after.as_secs_f64()
    );
    println!(
        "- search (ef_search {}), {} questions on one thread (the fastest of {} passes): \
         before the erasures p50 {:.0} µs, p99 {:.0} µs; after them p50 {:.0} µs, p99 {:.0} µs; recall@{K} after, against the exact \
         scan: {:.4}",
        index.config().ef_search,
        questions.len(),
        measure::ROUNDS,
        before.latency_us(50.0),
        before.latency_us(99.0),
        after.latency_us(50.0),
        after.latency_us(99.0),
        measure::recall(&exact, &after.hits)
    );
    Ok(())
}

/// The index kept at `snapshot`, or the grown corpus built and kept there.
fn open_or_build(
    snapshot: &Path,
    corpus: &[f32],
    dimension: usize,
    size: usize,
) -> anyhow::Result<(VectorIndex, Origin)> {
    if snapshot.exists() {
        eprintln!("memlayer-bench: loading {}", snapshot.display());
        let start = Instant::now();
        let (mut index, _) = VectorIndex::load(snapshot, VectorConfig::new(dimension))?;
        // A no-op for a snapshot of a complete graph, which this one is.
        index.build_graph();
        return Ok((index, Origin::Loaded(start.elapsed())));
    }
    eprintln!("memlayer-bench: building an index of {size} vectors (minutes)");
    let vectors = grown(corpus, dimension, size);
    let start = Instant::now();
    let mut index = VectorIndex::new(VectorConfig::new(dimension))?;
    index.insert_batch((0u64..).zip(vectors.chunks_exact(dimension)))?;
    drop(vectors);
    index.build_graph();
    let build = start.elapsed();
    let start = Instant::now();
    index
        .save(snapshot, 0)
        .with_context(|| format!("could not keep {}", snapshot.display()))?;
    let save = start.elapsed();
    Ok((index, Origin::Built { build, save }))
}

/// `corpus` followed by noisy copies of its vectors, in order, up to `size` vectors.
fn grown(corpus: &[f32], dimension: usize, size: usize) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(18);
    let real = corpus.len() / dimension;
    let mut vectors = Vec::with_capacity(size * dimension);
    vectors.extend_from_slice(corpus);
    for source in corpus.chunks_exact(dimension).cycle().take(size - real) {
        let start = vectors.len();
        vectors.extend(
            source
                .iter()
                .map(|component| component + rng.random_range(-NOISE..NOISE)),
        );
        let copy = &mut vectors[start..];
        let norm = copy.iter().map(|c| c * c).sum::<f32>().sqrt();
        copy.iter_mut().for_each(|c| *c /= norm);
    }
    vectors
}
