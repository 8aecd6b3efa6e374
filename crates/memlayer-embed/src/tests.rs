//! Tests against the real model and the real ONNX Runtime library, found through
//! `MEMLAYER_ASSETS_DIR` or else `<workspace>/memlayer-assets`. Missing assets fail the tests
//! with the command that installs them: a skipped embedding test would hide a broken set-up.

use std::sync::OnceLock;

use crate::test_support::{assets, assets_dir};
use crate::{Assets, CacheStats, EmbedError, Embedder, EmbedderOptions};

/// The namespace (tenant) the tests embed for.
const NS: &str = "tenant";

/// The pinned sha256 of the model file that `cargo xtask setup` installs.
const MODEL_SHA256: &str = "afdb6f1a0e45b715d0bb9b11772f032c399babd23bfc31fed1c170afc848bdb1";

/// Without a cache, so every call really runs the model.
fn uncached_options() -> EmbedderOptions {
    EmbedderOptions {
        cache_capacity: 0,
        ..EmbedderOptions::default()
    }
}

/// One embedder for the tests that only read vectors: loading the model takes a second in a
/// debug build.
fn shared() -> &'static Embedder {
    static SHARED: OnceLock<Embedder> = OnceLock::new();
    SHARED.get_or_init(|| Embedder::open(&assets(), uncached_options()).expect("model loads"))
}

fn embed_one(embedder: &Embedder, text: &str) -> Vec<f32> {
    let mut vectors = embedder
        .embed_blocking(NS, &[text])
        .expect("embedding works");
    assert_eq!(vectors.len(), 1);
    vectors.remove(0)
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    dot / (norm(a) * norm(b))
}

fn norm(v: &[f32]) -> f32 {
    v.iter().map(|x| x * x).sum::<f32>().sqrt()
}

fn max_difference(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn identity_names_the_model_file() {
    let identity = shared().identity();
    assert_eq!(identity.name, "all-MiniLM-L6-v2-quantized");
    assert_eq!(identity.sha256, MODEL_SHA256);
    assert_eq!(identity.dimension, 384);
}

#[test]
fn vectors_have_the_model_dimension_and_unit_length() {
    let long = "word ".repeat(600);
    let texts = ["My favourite colour is blue", "", long.as_str()];
    let vectors = shared()
        .embed_blocking(NS, &texts)
        .expect("embedding works");
    assert_eq!(vectors.len(), texts.len());
    for vector in &vectors {
        assert_eq!(vector.len(), 384);
        assert!((norm(vector) - 1.0).abs() < 1e-4, "norm {}", norm(vector));
    }
}

#[test]
fn same_text_gives_the_identical_vector() {
    let text = "Can you move the standup to 9am tomorrow?";
    assert_eq!(embed_one(shared(), text), embed_one(shared(), text));
}

#[test]
fn similar_meanings_are_closer() {
    let blue = embed_one(shared(), "My favourite colour is blue");
    let also_blue = embed_one(shared(), "I like the colour blue best");
    let invoice = embed_one(shared(), "The invoice is due on Friday");
    let similar = cosine(&blue, &also_blue);
    let unrelated = cosine(&blue, &invoice);
    assert!(
        similar > unrelated + 0.2,
        "similar {similar}, unrelated {unrelated}"
    );
}

#[test]
fn a_batch_gives_the_vectors_of_single_texts() {
    let texts = [
        "ok",
        "The printer on the third floor is jammed again.",
        "Could you book a table for four people at 8 in the evening, and remind Alice \
         that she promised to bring the slides for the quarterly budget review?",
        "thanks!",
        "My flight to Lisbon got moved to Tuesday.",
    ];
    let batch = shared()
        .embed_blocking(NS, &texts)
        .expect("embedding works");
    for (text, batched) in texts.iter().zip(&batch) {
        let single = embed_one(shared(), text);
        let difference = max_difference(&single, batched);
        assert!(difference < 1e-5, "{text:?} differs by {difference}");
    }
}

#[test]
fn requests_larger_than_a_batch_keep_their_order() {
    let options = EmbedderOptions {
        max_batch: 1,
        ..uncached_options()
    };
    let embedder = Embedder::open(&assets(), options).expect("model loads");
    let texts = [
        "a much longer message than the others in this request",
        "short",
        "a message of medium length",
        "short",
        "tiny",
    ];
    let vectors = embedder
        .embed_blocking(NS, &texts)
        .expect("embedding works");
    for (text, vector) in texts.iter().zip(&vectors) {
        let difference = max_difference(&embed_one(shared(), text), vector);
        assert!(difference < 1e-5, "{text:?} differs by {difference}");
    }
    assert_eq!(vectors[1], vectors[3]);
    assert!(
        embedder
            .embed_blocking(NS, &[])
            .expect("nothing to embed")
            .is_empty()
    );
}

#[test]
fn cache_hits_return_the_identical_vector_and_are_counted() {
    let embedder = Embedder::open(&assets(), EmbedderOptions::default()).expect("model loads");
    let first = embedder
        .embed_blocking(NS, &["remember my order number 4711", "hello"])
        .expect("embedding works");
    assert_eq!(
        embedder.cache_stats(),
        CacheStats {
            hits: 0,
            misses: 2,
            entries: 2
        }
    );
    let again = embedder
        .embed_blocking(NS, &["remember my order number 4711"])
        .expect("embedding works");
    assert_eq!(again[0], first[0]);
    // A text repeated inside one request is embedded once but counted at each place.
    let repeated = embedder
        .embed_blocking(NS, &["hello", "new text", "new text"])
        .expect("embedding works");
    assert_eq!(repeated[0], first[1]);
    assert_eq!(repeated[1], repeated[2]);
    assert_eq!(
        embedder.cache_stats(),
        CacheStats {
            hits: 2,
            misses: 4,
            entries: 3
        }
    );

    // Another namespace (tenant) gets nothing of the first's: the same text is a miss, and
    // clearing one namespace leaves the other's vectors.
    let other = embedder
        .embed_blocking("another tenant", &["hello"])
        .expect("embedding works");
    assert_eq!(other[0], first[1], "the same text, the same vector");
    assert_eq!(
        (embedder.cache_stats().hits, embedder.cache_stats().misses),
        (2, 5)
    );
    embedder.clear_cache(NS);
    assert_eq!(embedder.cache_stats().entries, 1);
    embedder
        .embed_blocking("another tenant", &["hello"])
        .expect("embedding works");
    assert_eq!(embedder.cache_stats().hits, 3);
}

#[test]
fn missing_model_is_a_missing_asset() {
    let empty = tempfile::tempdir().expect("temp dir");
    let assets = Assets {
        model_dir: empty.path().join("model"),
        ..assets()
    };
    let err = Embedder::open(&assets, uncached_options()).err();
    let expected_path = empty.path().join("model/model.onnx");
    assert!(
        matches!(&err, Some(EmbedError::MissingAsset { path, .. }) if *path == expected_path),
        "{err:?}"
    );
    let message = err.expect("an error").to_string();
    assert!(message.contains("cargo xtask setup"), "{message}");
}

#[test]
fn missing_runtime_library_is_a_missing_asset() {
    let empty = tempfile::tempdir().expect("temp dir");
    let library = empty.path().join("libonnxruntime.so");
    let assets = Assets {
        runtime_library: library.clone(),
        ..assets()
    };
    let err = Embedder::open(&assets, uncached_options()).err();
    assert!(
        matches!(&err, Some(EmbedError::MissingAsset { path, .. }) if *path == library),
        "{err:?}"
    );
}

#[test]
fn zero_options_are_rejected() {
    let options = EmbedderOptions {
        max_batch: 0,
        ..EmbedderOptions::default()
    };
    let err = Embedder::open(&assets(), options).err();
    assert!(
        matches!(
            err,
            Some(EmbedError::InvalidOptions {
                option: "max_batch",
                ..
            })
        ),
        "{err:?}"
    );
}

#[test]
fn a_shut_down_embedder_refuses_work() {
    let embedder = Embedder::open(&assets(), uncached_options()).expect("model loads");
    let clone = embedder.clone();
    embedder.shutdown();
    assert_eq!(
        clone.embed_blocking(NS, &["anything"]).err(),
        Some(EmbedError::ShutDown)
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let result = runtime.block_on(clone.embed(NS, vec!["anything".to_owned()]));
    assert_eq!(result.err(), Some(EmbedError::ShutDown));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_from_many_tasks_all_succeed() {
    let embedder = Embedder::open(&assets(), EmbedderOptions::default()).expect("model loads");
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..48 {
        let embedder = embedder.clone();
        tasks.spawn(async move {
            let texts = vec![
                format!("message {task} from a concurrent client"),
                "the same greeting from everyone".to_owned(),
            ];
            let vectors = embedder.embed(NS, texts.clone()).await;
            (texts, vectors)
        });
    }
    let mut greeting: Option<Vec<f32>> = None;
    while let Some(joined) = tasks.join_next().await {
        let (texts, vectors) = joined.expect("task completes");
        let vectors = vectors.expect("embedding works");
        assert_eq!(vectors.len(), texts.len());
        assert!(vectors.iter().all(|vector| vector.len() == 384));
        // Racing tasks may embed the shared text more than once before it is cached; each
        // time it must give the same vector.
        let expected = greeting.get_or_insert_with(|| vectors[1].clone());
        assert!(max_difference(expected, &vectors[1]) < 1e-5);
    }
    let stats = embedder.cache_stats();
    assert_eq!(stats.hits + stats.misses, 96);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_embedded_ahead_of_the_pipelines_backlog() {
    // With a worker of its own, and without one: either way the request's batch is taken
    // before the backlog's.
    for request_workers in [1, 0] {
        let options = EmbedderOptions {
            workers: 1,
            request_workers,
            ..uncached_options()
        };
        let embedder = Embedder::open(&assets(), options).expect("model loads");
        let backlog: Vec<String> = (0..300)
            .map(|n| format!("appended message number {n} waiting to be indexed"))
            .collect();
        let pipeline = {
            let embedder = embedder.clone();
            tokio::spawn(async move { embedder.embed_in_background(NS, backlog).await })
        };
        while embedder.queue_depths().background < 200 {
            tokio::task::yield_now().await;
        }
        let question = embedder
            .embed(NS, vec!["what was the parcel's number?".to_owned()])
            .await
            .expect("embedding works");
        assert_eq!(question.len(), 1);
        let left = embedder.queue_depths();
        assert!(
            left.background > 100,
            "the request waited for the backlog ({request_workers} request workers): {left:?}"
        );
        assert_eq!(left.request, 0);
        let indexed = pipeline.await.expect("task").expect("embedding works");
        assert_eq!(indexed.len(), 300);
    }
}

#[test]
fn backlog_workers_run_only_where_requests_leave_a_core_idle() {
    let options = EmbedderOptions {
        workers: 1,
        request_workers: 1,
        ..uncached_options()
    };
    let embedder = Embedder::open(&assets(), options).expect("model loads");
    // The scheduling policy of the thread named `name`; `None` until the thread has named
    // itself.
    let policy_of = |name: &str| {
        std::fs::read_dir("/proc/self/task")
            .expect("procfs")
            .filter_map(Result::ok)
            .find(|task| {
                std::fs::read_to_string(task.path().join("comm"))
                    .is_ok_and(|comm| comm.trim_end() == name)
            })
            .and_then(|task| {
                let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
                crate::test_support::scheduling_policy(&stat)
            })
    };
    const SCHED_OTHER: i32 = 0;
    const SCHED_IDLE: i32 = 5;
    // A worker names itself and sets its priority once it runs, which may be after `open`
    // returns.
    let names = ["embed-request-0", "embed-backlog-1"];
    let expected = [Some(SCHED_OTHER), Some(SCHED_IDLE)];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut seen = names.map(policy_of);
    while seen != expected && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
        seen = names.map(policy_of);
    }
    assert_eq!(seen, expected, "{names:?}");
    embedder.shutdown();
}

/// `cargo xtask setup` installs every file the embedder looks for, where it looks: the paths
/// of the manifest it writes (`manifest.sha256`, `sha256sum` lines listing every installed
/// file), as empty files in a fresh directory, are all the embedder needs. (This test lived
/// in xtask, which no longer links this crate.)
#[test]
fn layout_matches_the_embedder() {
    let manifest = std::fs::read_to_string(assets_dir().join("manifest.sha256"))
        .expect("`cargo xtask setup` wrote the manifest");
    let dir = tempfile::tempdir().expect("temp dir");
    for line in manifest.lines() {
        let (_, path) = line.split_once("  ").expect("hash, two spaces, path");
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("a file in a folder")).expect("mkdir");
        std::fs::write(&path, b"").expect("write");
    }
    Assets::in_dir(dir.path())
        .check()
        .expect("the embedder finds every file");
}
