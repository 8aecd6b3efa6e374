//! Exact scan against HNSW at 10,000 vectors of dimension 384: queries per second from
//! criterion, recall@10 of HNSW against the exact scan printed beside them.
//!
//! Two synthetic data sets stand in for real embeddings until the embedder is wired in:
//!
//! - `latent`: 20 clusters in a 16-dimensional latent space, projected to 384 dimensions
//!   with noise and normalised. Sentence embeddings have a low intrinsic dimension, and on
//!   this set HNSW behaves as measured on 100k real MiniLM vectors (recall@10 ≈ 0.98-0.99
//!   at ef 64).
//! - `isotropic`: 20 cluster centres plus gaussian noise in all 384 dimensions. Inside a
//!   cluster every point is then about equally far from every other, as with uniformly
//!   random vectors, and HNSW recall collapses: a worst case, not a forecast.
//!
//! Run with `cargo bench -p memlayer-index -- --quick`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use memlayer_index::{VectorConfig, VectorIndex};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rand_distr::StandardNormal;

const DIMENSION: usize = 384;
const VECTORS: usize = 10_000;
const QUERIES: usize = 100;
const CLUSTERS: usize = 20;
const LATENT: usize = 16;

fn normalised(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

fn gaussian(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.sample(StandardNormal)).collect()
}

/// `n` vectors from the `latent` set; the same `structure_seed` gives the same clusters and
/// projection, `seed` draws the points.
fn latent(structure_seed: u64, seed: u64, n: usize) -> Vec<Vec<f32>> {
    let mut structure = StdRng::seed_from_u64(structure_seed);
    let projection = gaussian(&mut structure, DIMENSION * LATENT);
    let centres: Vec<Vec<f32>> = (0..CLUSTERS)
        .map(|_| gaussian(&mut structure, LATENT))
        .collect();
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let z: Vec<f32> = centres[i % CLUSTERS]
                .iter()
                .map(|c| c + 0.5 * rng.sample::<f32, _>(StandardNormal))
                .collect();
            let x = projection
                .chunks_exact(LATENT)
                .map(|row| {
                    row.iter().zip(&z).map(|(p, z)| p * z).sum::<f32>()
                        + 6.0 * rng.sample::<f32, _>(StandardNormal)
                })
                .collect();
            normalised(x)
        })
        .collect()
}

/// `n` vectors from the `isotropic` set.
fn isotropic(structure_seed: u64, seed: u64, n: usize) -> Vec<Vec<f32>> {
    let mut structure = StdRng::seed_from_u64(structure_seed);
    let centres: Vec<Vec<f32>> = (0..CLUSTERS)
        .map(|_| normalised(gaussian(&mut structure, DIMENSION)))
        .collect();
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            normalised(
                centres[i % CLUSTERS]
                    .iter()
                    .map(|c| c + 0.05 * rng.sample::<f32, _>(StandardNormal))
                    .collect(),
            )
        })
        .collect()
}

fn bench_data_set(c: &mut Criterion, name: &str, generate: fn(u64, u64, usize) -> Vec<Vec<f32>>) {
    let vectors = generate(1, 2, VECTORS);
    let queries = generate(1, 3, QUERIES);
    let mut config = VectorConfig::new(DIMENSION);
    // Force the graph at this size whatever the default threshold is.
    config.hnsw_threshold = 0;
    let mut index = VectorIndex::new(config).unwrap();
    let build = std::time::Instant::now();
    index
        .insert_batch(
            vectors
                .iter()
                .enumerate()
                .map(|(id, v)| (id as u64, v.as_slice())),
        )
        .unwrap();
    index.build_graph();
    let build = build.elapsed();

    let mut found = 0;
    for query in &queries {
        let exact = index.search_exact(query, 10, None).unwrap();
        let approximate = index.search(query, 10, None).unwrap();
        found += approximate
            .iter()
            .filter(|hit| exact.iter().any(|e| e.0 == hit.0))
            .count();
    }
    println!(
        "{name}: {VECTORS} vectors, HNSW built in {:.1} s (2 threads), recall@10 {:.3}",
        build.as_secs_f64(),
        found as f64 / (10 * QUERIES) as f64
    );

    let mut group = c.benchmark_group(format!("search_10k_{name}"));
    group.throughput(Throughput::Elements(QUERIES as u64));
    group.bench_function("exact", |b| {
        b.iter(|| {
            for query in &queries {
                black_box(index.search_exact(query, 10, None).unwrap());
            }
        })
    });
    group.bench_function("hnsw_ef64", |b| {
        b.iter(|| {
            for query in &queries {
                black_box(index.search(query, 10, None).unwrap());
            }
        })
    });
    group.finish();
}

fn search(c: &mut Criterion) {
    bench_data_set(c, "latent", latent);
    bench_data_set(c, "isotropic", isotropic);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = search
}
criterion_main!(benches);
