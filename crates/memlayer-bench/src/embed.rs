//! `embed`: embedding throughput of memlayer's `Embedder` against Python
//! onnxruntime running the same `model.onnx` with the same tokenizer, pooling and batches,
//! side by side in one run, plus the cosine between the two sides' vectors (the reference
//! check that the Rust path computes the model's embedding). A second table compares worker
//! layouts of the Embedder under concurrent requests, which is what chose its default.
//!
//! Both sides use one ONNX Runtime intra-op thread, so the ratio compares implementations
//! rather than how each spreads over cores. Each configuration runs `ROUNDS` times,
//! interleaved with the other side, and the best round counts: on a shared machine the best
//! round is the one least disturbed by other work.

mod python;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use memlayer_embed::{Assets, Embedder, EmbedderOptions, ModelIdentity};
use tokio::task::JoinSet;

use crate::corpus::{self, chat};
use crate::report::{command_line, date, load_average};

const TEXTS: usize = 1000;
/// The embedder's cache namespace (a server passes the tenant); the texts are the
/// benchmark's own.
const NAMESPACE: &str = "bench";
const BATCH_SIZES: [usize; 3] = [1, 32, 256];
const ROUNDS: usize = 3;
/// ONNX Runtime intra-op threads on both sides of the comparison.
const THREADS: usize = 1;
const MAX_LENGTH: usize = 256;

/// Worker layouts compared: (workers, intra-op threads each).
const LAYOUTS: [(usize, usize); 3] = [(1, 1), (1, 2), (2, 1)];

/// How texts reach the embedder in the layout comparison.
#[derive(Clone, Copy)]
enum Load {
    /// Requests of this many texts, all submitted at once from tokio tasks: a server
    /// receiving messages faster than it embeds them.
    InFlight(usize),
    /// One request of this many texts at a time: the latency of a lone bulk request.
    OneAtATime(usize),
}

const LOADS: [Load; 3] = [Load::InFlight(1), Load::InFlight(32), Load::OneAtATime(32)];

impl Load {
    fn describe(self) -> String {
        match self {
            Self::InFlight(1) => "single texts, all in flight".to_owned(),
            Self::InFlight(size) => format!("requests of {size}, all in flight"),
            Self::OneAtATime(size) => format!("requests of {size}, one at a time"),
        }
    }
}

/// The Rust-against-Python comparison at one batch size.
struct Row {
    batch: usize,
    rust: Duration,
    python: Duration,
    cosine_min: f64,
    cosine_mean: f64,
}

/// One worker layout's best time under each load of `LOADS`.
struct Layout {
    workers: usize,
    intra_threads: usize,
    best: [Duration; LOADS.len()],
}

/// The fixed inputs of a run.
struct Bench {
    assets: Assets,
    venv: python::Venv,
    texts: Vec<String>,
    /// `texts` as JSON, for the reference script.
    texts_json: PathBuf,
    /// Where the reference script writes its vectors.
    vectors_out: PathBuf,
}

pub(crate) fn run(root: &Path, assets: &Assets, target_dir: &Path) -> anyhow::Result<()> {
    let venv = python::Venv::ensure(target_dir)?;
    let work = tempfile::Builder::new()
        .prefix("memlayer-bench-embed-")
        .tempdir()
        .context("could not create a temporary directory")?;
    let texts = chat::short_messages(TEXTS);
    let texts_json = work.path().join("texts.json");
    std::fs::write(&texts_json, serde_json::to_vec(&texts)?)
        .context("could not write the texts for the reference script")?;
    let bench = Bench {
        assets: assets.clone(),
        venv,
        texts,
        texts_json,
        vectors_out: work.path().join("vectors.f32"),
    };

    let load_before = load_average()?;
    let (rows, identity, python_versions) = bench.against_python()?;
    let layouts = bench.layouts()?;
    let load_after = load_average()?;

    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let words: usize = bench
        .texts
        .iter()
        .map(|text| text.split_whitespace().count())
        .sum();

    println!("## memlayer embedding benchmark");
    println!();
    println!("- command: `{}`", command_line());
    println!("- date: {}", date()?);
    println!(
        "- machine: {cpus} CPUs (available parallelism), {} {}",
        std::env::consts::OS,
        std::env::consts::ARCH
    );
    println!(
        "- load average (1 min) before / after: {load_before} / {load_after}; the machine may \
         be shared, so compare runs with similar load"
    );
    println!(
        "- model: {} (`model.onnx` sha256 {}…), {} dimensions, truncation at {MAX_LENGTH} tokens",
        identity.name,
        &identity.sha256[..12],
        identity.dimension
    );
    println!(
        "- texts: {TEXTS} generated chat messages of {}–{} words (mean {:.1}), each pass \
         embeds all of them; cache off",
        corpus::MIN_WORDS,
        corpus::MAX_WORDS,
        words as f64 / TEXTS as f64
    );
    println!(
        "- Rust: `memlayer_embed::Embedder::embed_blocking`, one call per batch, release build, \
         ONNX Runtime from `{}` ({})",
        bench
            .assets
            .runtime_library
            .strip_prefix(root)
            .unwrap_or(&bench.assets.runtime_library)
            .display(),
        python::ONNXRUNTIME
    );
    println!(
        "- Python: `{}` ({python_versions}), same model file, tokenizer, mean pooling and L2 \
         norm",
        Path::new(python::SCRIPT)
            .strip_prefix(root)
            .unwrap_or(Path::new(python::SCRIPT))
            .display()
    );
    println!(
        "- both: {THREADS} ONNX Runtime intra-op thread, each batch sorted by length as the \
         Embedder does, one untimed warm-up batch, best of {ROUNDS} interleaved rounds"
    );
    println!();
    println!(
        "| batch | Rust texts/s | Python texts/s | Rust / Python | cosine min | cosine mean |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    for row in &rows {
        let rust = rate(row.rust);
        let python = rate(row.python);
        println!(
            "| {} | {rust:.1} | {python:.1} | {:.2} | {:.9} | {:.9} |",
            row.batch,
            rust / python,
            row.cosine_min,
            row.cosine_mean
        );
    }
    println!();
    println!("### Embedder worker layouts (max batch 32; in flight: `embed` from tokio tasks)");
    println!();
    let header: Vec<String> = LOADS
        .iter()
        .map(|load| format!("{}: texts/s", load.describe()))
        .collect();
    println!("| workers × threads | {} |", header.join(" | "));
    println!("| --- |{}", " ---: |".repeat(LOADS.len()));
    for layout in &layouts {
        let rates: Vec<String> = layout
            .best
            .iter()
            .map(|&elapsed| format!("{:.1}", rate(elapsed)))
            .collect();
        println!(
            "| {} × {} | {} |",
            layout.workers,
            layout.intra_threads,
            rates.join(" | ")
        );
    }
    Ok(())
}

impl Bench {
    /// Times both sides at every batch size, alternating between them, and compares their
    /// vectors. Returns the rows, the model's identity and the Python packages' versions.
    fn against_python(&self) -> anyhow::Result<(Vec<Row>, ModelIdentity, String)> {
        // Every request is one batch: max_batch is the largest request.
        let options = EmbedderOptions {
            workers: 1,
            // One model instance, as the Python side has.
            request_workers: 0,
            intra_threads: THREADS,
            max_batch: BATCH_SIZES[BATCH_SIZES.len() - 1],
            // Each pass embeds the same texts again; a cache would measure itself.
            cache_capacity: 0,
            max_length: MAX_LENGTH,
        };
        let embedder = Embedder::open(&self.assets, options)?;
        let text_refs: Vec<&str> = self.texts.iter().map(String::as_str).collect();
        let mut rows: Vec<Row> = BATCH_SIZES
            .iter()
            .map(|&batch| Row {
                batch,
                rust: Duration::MAX,
                python: Duration::MAX,
                cosine_min: f64::NAN,
                cosine_mean: f64::NAN,
            })
            .collect();
        let mut python_versions = String::new();
        for round in 1..=ROUNDS {
            for row in &mut rows {
                eprintln!(
                    "memlayer-bench: round {round}/{ROUNDS}, batch {}",
                    row.batch
                );
                let (elapsed, rust_vectors) = time_blocking(&embedder, &text_refs, row.batch)?;
                row.rust = row.rust.min(elapsed);
                let settings = python::Settings {
                    model_dir: &self.assets.model_dir,
                    texts_json: &self.texts_json,
                    batch_size: row.batch,
                    threads: THREADS,
                    max_length: MAX_LENGTH,
                };
                let (run, python_vectors) = self.venv.run(&settings, &self.vectors_out)?;
                row.python = row.python.min(Duration::from_secs_f64(run.seconds));
                python_versions = format!(
                    "onnxruntime {}, tokenizers {}",
                    run.onnxruntime, run.tokenizers
                );
                (row.cosine_min, row.cosine_mean) = compare(
                    &rust_vectors,
                    &python_vectors,
                    embedder.identity().dimension,
                )?;
            }
        }
        Ok((rows, embedder.identity().clone(), python_versions))
    }

    /// Times every worker layout under every load. All layouts are open at once and take
    /// turns within each round, so a burst of other work on the machine hurts them alike.
    fn layouts(&self) -> anyhow::Result<Vec<Layout>> {
        let text_refs: Vec<&str> = self.texts.iter().map(String::as_str).collect();
        let mut layouts = Vec::new();
        for (workers, intra_threads) in LAYOUTS {
            let options = EmbedderOptions {
                workers,
                // The layout alone: no worker beside it.
                request_workers: 0,
                intra_threads,
                max_batch: 32,
                cache_capacity: 0,
                max_length: MAX_LENGTH,
            };
            let layout = Layout {
                workers,
                intra_threads,
                best: [Duration::MAX; LOADS.len()],
            };
            layouts.push((layout, Embedder::open(&self.assets, options)?));
        }
        for round in 1..=ROUNDS {
            for (layout, embedder) in &mut layouts {
                for (load, best) in LOADS.iter().zip(layout.best.iter_mut()) {
                    eprintln!(
                        "memlayer-bench: round {round}/{ROUNDS}, {} worker(s) × {} thread(s), {}",
                        layout.workers,
                        layout.intra_threads,
                        load.describe()
                    );
                    let elapsed = match *load {
                        Load::InFlight(size) => time_concurrent(embedder, &self.texts, size)?,
                        Load::OneAtATime(size) => time_blocking(embedder, &text_refs, size)?.0,
                    };
                    *best = (*best).min(elapsed);
                }
            }
        }
        Ok(layouts.into_iter().map(|(layout, _)| layout).collect())
    }
}

fn rate(elapsed: Duration) -> f64 {
    TEXTS as f64 / elapsed.as_secs_f64()
}

/// Embeds every text in requests of `batch`, one after the other, after one untimed request.
fn time_blocking(
    embedder: &Embedder,
    texts: &[&str],
    batch: usize,
) -> anyhow::Result<(Duration, Vec<f32>)> {
    embedder.embed_blocking(NAMESPACE, &texts[..batch])?;
    let start = Instant::now();
    let mut vectors = Vec::with_capacity(texts.len() * embedder.identity().dimension);
    for chunk in texts.chunks(batch) {
        for vector in embedder.embed_blocking(NAMESPACE, chunk)? {
            vectors.extend(vector);
        }
    }
    Ok((start.elapsed(), vectors))
}

/// Embeds every text in requests of `request` texts, all submitted at once from tokio tasks,
/// as a server under load would.
fn time_concurrent(
    embedder: &Embedder,
    texts: &[String],
    request: usize,
) -> anyhow::Result<Duration> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .context("could not start a tokio runtime")?;
    runtime.block_on(async {
        let start = Instant::now();
        let mut tasks = JoinSet::new();
        for chunk in texts.chunks(request) {
            let embedder = embedder.clone();
            let chunk = chunk.to_vec();
            tasks.spawn(async move { embedder.embed(NAMESPACE, chunk).await });
        }
        while let Some(result) = tasks.join_next().await {
            result.context("an embedding task panicked")??;
        }
        Ok(start.elapsed())
    })
}

/// The minimum and mean cosine between corresponding vectors of the two sides.
fn compare(rust: &[f32], python: &[f32], dimension: usize) -> anyhow::Result<(f64, f64)> {
    anyhow::ensure!(
        rust.len() == TEXTS * dimension && python.len() == TEXTS * dimension,
        "Rust gave {} floats and Python {} for {TEXTS} vectors of {dimension}",
        rust.len(),
        python.len()
    );
    let cosines: Vec<f64> = rust
        .chunks(dimension)
        .zip(python.chunks(dimension))
        .map(|(a, b)| {
            let dot: f64 = a
                .iter()
                .zip(b)
                .map(|(x, y)| f64::from(*x) * f64::from(*y))
                .sum();
            let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
            dot / (norm(a) * norm(b))
        })
        .collect();
    let min = cosines.iter().copied().fold(f64::INFINITY, f64::min);
    let mean = cosines.iter().sum::<f64>() / cosines.len() as f64;
    Ok((min, mean))
}
