//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`; no memlayer binary enables
//! it): the snapshot reader on bytes, without a file per input.

use crate::snapshot;
use crate::{Result, VectorConfig, VectorIndex};

/// Loads `bytes` as a snapshot of `dimension`-dimensional vectors exactly as
/// [`VectorIndex::load`] loads a file, and answers the number of vectors loaded. Damaged input
/// must be an error, never a panic or an allocation larger than the input; a loaded index must
/// answer searches, through the graph the file holds (the threshold is 1 so that small inputs
/// keep theirs).
pub fn load_snapshot(bytes: &[u8], dimension: usize) -> Result<usize> {
    let mut config = VectorConfig::new(dimension);
    config.hnsw_threshold = 1;
    config.validate()?;
    let parsed = snapshot::parse(bytes, bytes.len() as u64, &config)?;
    let (index, _) = VectorIndex::from_snapshot(parsed, config)?;
    let mut query = vec![0.0; dimension];
    query[0] = 1.0;
    let hits = index.search(&query, 10, None)?;
    assert!(hits.len() <= index.len().min(10), "more hits than vectors");
    Ok(index.len())
}
