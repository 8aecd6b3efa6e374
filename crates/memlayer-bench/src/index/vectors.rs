//! Embedding the benchmark's texts, with the vectors cached on disk: 100,000 texts take
//! minutes on two cores, and a rerun that changes nothing but the index should not pay them
//! again.
//!
//! A cache file is named by the kind, count and a hash of the texts themselves, so any
//! change to the generator names a new file; its header repeats the text hash and adds the
//! model's sha256, and both are checked on load, as is the length. Layout, integers and
//! floats little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `MLBIXVEC` |
//! | 8 | 4 | format version (1) |
//! | 12 | 4 | dimension `d` |
//! | 16 | 8 | count `n` |
//! | 24 | 64 | sha256 of `model.onnx`, lowercase hex |
//! | 88 | 32 | sha256 of the texts (each as its length, `u64`, then its UTF-8 bytes) |
//! | 120 | `4 n d` | the vectors, text by text |

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use memlayer_embed::{Embedder, ModelIdentity};
use sha2::{Digest, Sha256};

const MAGIC: [u8; 8] = *b"MLBIXVEC";
/// The embedder's cache namespace (a server passes the tenant); the texts are the
/// benchmark's own.
const NAMESPACE: &str = "bench";
const VERSION: u32 = 1;
const HEADER_LEN: usize = 120;

/// Texts per `embed_blocking` call: one progress line each.
const PROGRESS_EVERY: usize = 10_000;

/// The vectors of some texts, `dimension` floats per text, and where they came from.
pub(crate) struct Embedded {
    pub(crate) vectors: Vec<f32>,
    pub(crate) path: PathBuf,
    /// How many texts this run embedded, and how long that took; the others' vectors came
    /// from the cache. `None` when the cache held them all.
    pub(crate) embedding: Option<(usize, Duration)>,
}

/// The vectors of `texts`, from `dir/<kind>-<count>-<hash>.bin` if it holds them for this
/// model, else embedded and written there. The texts of the benchmark's streams are
/// prefixes of each other, so the largest cached prefix of `texts` is reused and only the
/// rest is embedded.
pub(crate) fn load_or_embed(
    embedder: &Embedder,
    texts: &[String],
    dir: &Path,
    kind: &str,
) -> anyhow::Result<Embedded> {
    let identity = embedder.identity();
    let path = cache_path(dir, kind, texts);
    let (mut vectors, reused) = match cached_prefix(dir, kind, texts, identity) {
        Some((vectors, from)) if vectors.len() == texts.len() * identity.dimension => {
            eprintln!(
                "memlayer-bench: {} {kind} vectors from {}",
                texts.len(),
                from.display()
            );
            return Ok(Embedded {
                vectors,
                path,
                embedding: None,
            });
        }
        Some((vectors, from)) => {
            let reused = vectors.len() / identity.dimension;
            eprintln!(
                "memlayer-bench: first {reused} {kind} vectors from {}",
                from.display()
            );
            (vectors, reused)
        }
        None => (Vec::new(), 0),
    };
    vectors.reserve(texts[reused..].len() * identity.dimension);
    let start = Instant::now();
    for chunk in texts[reused..].chunks(PROGRESS_EVERY) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        for vector in embedder.embed_blocking(NAMESPACE, &refs)? {
            vectors.extend(vector);
        }
        let done = vectors.len() / identity.dimension;
        let rate = (done - reused) as f64 / start.elapsed().as_secs_f64();
        eprintln!(
            "memlayer-bench: embedded {done}/{} {kind} texts ({rate:.0} texts/s, about {:.0} s left)",
            texts.len(),
            (texts.len() - done) as f64 / rate
        );
    }
    let embedding = (texts.len() - reused, start.elapsed());
    write(&path, identity, texts.len(), &hash_texts(texts), &vectors)?;
    Ok(Embedded {
        vectors,
        path,
        embedding: Some(embedding),
    })
}

fn cache_path(dir: &Path, kind: &str, texts: &[String]) -> PathBuf {
    let short: String = hash_texts(texts)[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    dir.join(format!("{kind}-{}-{short}.bin", texts.len()))
}

/// The vectors of the longest prefix of `texts` (all of them included) that a valid cache
/// file in `dir` holds, and that file. A file that does not verify is reported and passed
/// over.
fn cached_prefix(
    dir: &Path,
    kind: &str,
    texts: &[String],
    identity: &ModelIdentity,
) -> Option<(Vec<f32>, PathBuf)> {
    let prefix = format!("{kind}-");
    let mut counts: Vec<usize> = fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            let (count, _) = name.strip_prefix(&prefix)?.split_once('-')?;
            count.parse().ok()
        })
        .filter(|&count| (1..=texts.len()).contains(&count))
        .collect();
    counts.sort_unstable_by(|a, b| b.cmp(a));
    counts.dedup();
    counts.into_iter().find_map(|count| {
        let texts = &texts[..count];
        let path = cache_path(dir, kind, texts);
        if !path.exists() {
            return None;
        }
        match read(&path, identity, count, &hash_texts(texts)) {
            Ok(vectors) => Some((vectors, path)),
            Err(err) => {
                eprintln!("memlayer-bench: not using {} ({err:#})", path.display());
                None
            }
        }
    })
}

fn hash_texts(texts: &[String]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for text in texts {
        hasher.update((text.len() as u64).to_le_bytes());
        hasher.update(text.as_bytes());
    }
    hasher.finalize().into()
}

fn header(
    identity: &ModelIdentity,
    count: usize,
    texts_hash: &[u8; 32],
) -> anyhow::Result<Vec<u8>> {
    ensure!(
        identity.sha256.len() == 64,
        "model sha256 `{}` is not 64 hex digits",
        identity.sha256
    );
    let mut header = Vec::with_capacity(HEADER_LEN);
    header.extend_from_slice(&MAGIC);
    header.extend_from_slice(&VERSION.to_le_bytes());
    header.extend_from_slice(&u32::try_from(identity.dimension)?.to_le_bytes());
    header.extend_from_slice(&(count as u64).to_le_bytes());
    header.extend_from_slice(identity.sha256.as_bytes());
    header.extend_from_slice(texts_hash);
    Ok(header)
}

/// Writes beside `path` and renames, so an interrupted run never leaves a short file under
/// the name a later run trusts.
fn write(
    path: &Path,
    identity: &ModelIdentity,
    count: usize,
    texts_hash: &[u8; 32],
    vectors: &[f32],
) -> anyhow::Result<()> {
    let mut bytes = header(identity, count, texts_hash)?;
    bytes.reserve(vectors.len() * 4);
    for value in vectors {
        bytes.extend_from_slice(&value.to_le_bytes());
    }
    let temp = path.with_extension("bin.tmp");
    fs::write(&temp, &bytes).with_context(|| format!("could not write {}", temp.display()))?;
    fs::rename(&temp, path).with_context(|| format!("could not rename {}", temp.display()))
}

/// The vectors in `path`, if its header matches what this run would write byte for byte
/// and its body has exactly the expected length.
fn read(
    path: &Path,
    identity: &ModelIdentity,
    count: usize,
    texts_hash: &[u8; 32],
) -> anyhow::Result<Vec<f32>> {
    let bytes = fs::read(path).context("could not read it")?;
    let expected = header(identity, count, texts_hash)?;
    let Some((found, body)) = bytes.split_at_checked(HEADER_LEN) else {
        bail!("shorter than its header");
    };
    if found[..24] != expected[..24] {
        bail!("other format version, dimension or count");
    }
    if found[24..88] != expected[24..88] {
        bail!(
            "made by model sha256 {}",
            String::from_utf8_lossy(&found[24..88])
        );
    }
    if found[88..] != expected[88..] {
        bail!("made from other texts");
    }
    ensure!(
        body.len() == count * identity.dimension * 4,
        "body of {} bytes, expected {}",
        body.len(),
        count * identity.dimension * 4
    );
    Ok(body
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> ModelIdentity {
        ModelIdentity {
            name: "test".to_owned(),
            sha256: "ab".repeat(32),
            dimension: 2,
        }
    }

    #[test]
    fn finds_the_longest_cached_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let texts: Vec<String> = ["a", "b", "c", "d"].map(str::to_owned).to_vec();
        let vectors = [1.0, 0.0, 0.0, 1.0, 0.6, 0.8];
        for count in [1, 3] {
            let path = cache_path(dir.path(), "kind", &texts[..count]);
            let hash = hash_texts(&texts[..count]);
            write(&path, &identity(), count, &hash, &vectors[..2 * count]).unwrap();
        }
        // Another kind, and a file of other texts with a longer count, are not prefixes.
        let other: Vec<String> = ["x", "y", "z", "w"].map(str::to_owned).to_vec();
        for (kind, texts) in [("other", &texts), ("kind", &other)] {
            let path = cache_path(dir.path(), kind, texts);
            write(&path, &identity(), 4, &hash_texts(texts), &[1.0; 8]).unwrap();
        }

        let (found, path) = cached_prefix(dir.path(), "kind", &texts, &identity()).unwrap();
        assert_eq!(found, vectors);
        assert_eq!(path, cache_path(dir.path(), "kind", &texts[..3]));
        let (found, _) = cached_prefix(dir.path(), "kind", &texts[..1], &identity()).unwrap();
        assert_eq!(found, vectors[..2]);
        assert!(cached_prefix(dir.path(), "kind", &other[..2], &identity()).is_none());
    }

    #[test]
    fn round_trips_and_rejects_other_models_and_texts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.bin");
        let texts = ["a".to_owned(), "b".to_owned()];
        let hash = hash_texts(&texts);
        let vectors = [0.6, 0.8, -1.0, 0.0];
        write(&path, &identity(), 2, &hash, &vectors).unwrap();
        assert_eq!(read(&path, &identity(), 2, &hash).unwrap(), vectors);

        let other_model = ModelIdentity {
            sha256: "cd".repeat(32),
            ..identity()
        };
        assert!(read(&path, &other_model, 2, &hash).is_err());
        let other_texts = hash_texts(&["a".to_owned(), "c".to_owned()]);
        assert!(read(&path, &identity(), 2, &other_texts).is_err());

        let bytes = fs::read(&path).unwrap();
        fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        assert!(read(&path, &identity(), 2, &hash).is_err());
    }
}
