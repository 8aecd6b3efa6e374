//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`; no memlayer binary enables
//! it): the snapshot reader on bytes, without a file per input.

use crate::keyword::KeywordPartitions;
use crate::snapshot;
use crate::{Result, VectorConfig, VectorIndex};

/// Loads `bytes` as a snapshot of `dimension`-dimensional vectors exactly as a start loads a
/// file, and answers the number of vectors loaded. Damaged input must be an error, never a
/// panic or an allocation beyond a small multiple of the input; a loaded index must answer
/// searches, through the graph the file holds (the threshold is 1 so that small inputs keep
/// theirs), and its keyword partitions must find each one's terms and give every document
/// back.
pub fn load_snapshot(bytes: &[u8], dimension: usize) -> Result<usize> {
    let mut config = VectorConfig::new(dimension);
    config.hnsw_threshold = 1;
    config.validate()?;
    let mut parsed = snapshot::parse(bytes, bytes.len() as u64, &config)?;
    let keywords = parsed.keywords.take();
    let (index, _) = VectorIndex::from_snapshot(parsed, config)?;
    let mut query = vec![0.0; dimension];
    query[0] = 1.0;
    let hits = index.search(&query, 10, None)?;
    assert!(hits.len() <= index.len().min(10), "more hits than vectors");
    if let Some(keywords) = keywords {
        exercise_keywords(keywords.into_partitions());
    }
    Ok(index.len())
}

/// Searches every partition of `keywords` for its first term, then removes every document:
/// what loaded must hold together as if it had been indexed here.
fn exercise_keywords(mut keywords: KeywordPartitions<[String; 2]>) {
    for (partition, term) in keywords.first_terms() {
        let hits = keywords.search_terms(&partition, &[term], 10);
        assert!(!hits.is_empty(), "a stored term finds nothing");
        assert!(
            hits.iter().all(|(_, score)| score.is_finite()),
            "a score is not finite"
        );
    }
    keywords.retain(|_, _| false);
    assert_eq!(keywords.documents(), 0, "documents left after removing all");
}

#[cfg(test)]
mod tests {
    /// The committed seeds (`fuzz/seeds/index_snapshot`: the dimension byte, then a file) are
    /// snapshots that load, of every format: fuzzing starts from inputs that reach past the
    /// checks.
    #[test]
    fn the_committed_seeds_load() {
        let seeds = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/seeds/index_snapshot");
        let mut versions = std::collections::BTreeSet::new();
        for seed in std::fs::read_dir(&seeds).unwrap() {
            let path = seed.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            let (&dimension, file) = bytes.split_first().unwrap();
            let dimension = usize::from(dimension % 16) + 1;
            let loaded = super::load_snapshot(file, dimension);
            assert!(loaded.is_ok(), "{}: {loaded:?}", path.display());
            versions.insert(u32::from_le_bytes(file[8..12].try_into().unwrap()));
        }
        assert_eq!(versions.into_iter().collect::<Vec<_>>(), [1, 2, 3, 4]);
    }
}
