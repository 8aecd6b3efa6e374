//! Loading the ONNX Runtime library, in a process of its own: ort loads the library once per
//! process, so what happens when the first load fails can only be seen before any other test
//! has loaded it. One test function keeps the steps in order.

use std::path::{Path, PathBuf};

use memlayer_embed::{Assets, EmbedError, Embedder, EmbedderOptions};

fn assets() -> Assets {
    let dir = std::env::var_os("MEMLAYER_ASSETS_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../memlayer-assets"),
        PathBuf::from,
    );
    let assets = Assets::in_dir(dir);
    if let Err(err) = assets.check() {
        panic!("this test needs the real ONNX Runtime library: {err}");
    }
    assets
}

fn options() -> EmbedderOptions {
    EmbedderOptions {
        intra_threads: 1,
        cache_capacity: 0,
        ..EmbedderOptions::default()
    }
}

#[test]
fn a_bad_library_is_an_error_and_the_right_one_still_loads() {
    let real = assets();
    let dir = tempfile::tempdir().expect("temp dir");
    let not_a_library = dir.path().join("libonnxruntime.so");
    std::fs::write(&not_a_library, b"this is not a shared library").expect("write");
    let bad = Assets {
        runtime_library: not_a_library.clone(),
        ..real.clone()
    };

    // Where ort itself would panic, the embedder reports the loader's error.
    let err = Embedder::open(&bad, options()).err();
    assert!(
        matches!(&err, Some(EmbedError::RuntimeLoad { path, .. }) if *path == not_a_library),
        "{err:?}"
    );

    // A failed load leaves the process free to load the right library.
    let embedder = Embedder::open(&real, options()).expect("the real library loads");
    let vectors = embedder
        .embed_blocking("tenant", &["hello"])
        .expect("embedding works");
    assert_eq!(vectors[0].len(), 384);

    // Once one library is loaded, another cannot replace it.
    let err = Embedder::open(&bad, options()).err();
    match err {
        Some(EmbedError::RuntimeLoad { reason, .. }) => {
            assert!(reason.contains("already uses"), "{reason}");
        }
        other => panic!("expected RuntimeLoad, got {other:?}"),
    }
}
