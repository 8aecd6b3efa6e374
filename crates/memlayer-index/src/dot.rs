//! The dot product every vector comparison goes through, written so that the compiler
//! vectorises it without `unsafe` or intrinsics.

/// Lanes processed per step. Sixteen independent accumulators let the compiler keep four
/// SSE2 registers (or two AVX registers) busy: floating-point addition is not associative,
/// so it may not reorder a single running sum into SIMD lanes, but it may map an array of
/// independent sums onto them.
const LANES: usize = 16;

/// The dot product of two equally long slices; cosine similarity on L2-normalised vectors.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let (a_chunks, a_rest) = a.as_chunks::<LANES>();
    let (b_chunks, b_rest) = b.as_chunks::<LANES>();
    let mut acc = [0.0f32; LANES];
    for (x, y) in a_chunks.iter().zip(b_chunks) {
        for lane in 0..LANES {
            acc[lane] += x[lane] * y[lane];
        }
    }
    let tail: f32 = a_rest.iter().zip(b_rest).map(|(x, y)| x * y).sum();
    // Pairwise reduction keeps the rounding error of the horizontal sum small.
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for lane in 0..width {
            acc[lane] += acc[lane + width];
        }
    }
    acc[0] + tail
}

/// Checks that a vector can be indexed or used as a query: finite components and unit L2
/// norm. Scores are cosines only on unit vectors, and the HNSW distance `1 - dot` is only a
/// sensible (non-negative) distance between them.
pub(crate) fn check_unit(vector: &[f32]) -> Result<(), String> {
    if let Some(position) = vector.iter().position(|x| !x.is_finite()) {
        return Err(format!("component {position} is not finite"));
    }
    let norm = dot(vector, vector).sqrt();
    // Embedding models normalise in f32; 1e-3 accepts their rounding and rejects vectors
    // that were never normalised.
    if (norm - 1.0).abs() > 1e-3 {
        return Err(format!(
            "L2 norm is {norm}, expected 1 (normalise the vector)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_a_naive_sum_for_every_tail_length() {
        for len in [0, 1, 7, 15, 16, 17, 31, 384, 385] {
            let a: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..len).map(|i| (i as f32 * 0.11).cos()).collect();
            let naive: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(x * y)).sum();
            assert!(
                (f64::from(dot(&a, &b)) - naive).abs() < 1e-4,
                "len {len}: {} vs {naive}",
                dot(&a, &b)
            );
        }
    }

    #[test]
    fn check_unit_accepts_unit_vectors_only() {
        assert!(check_unit(&[0.6, 0.8]).is_ok());
        assert!(check_unit(&[0.6, 0.9]).is_err());
        assert!(check_unit(&[f32::NAN, 1.0]).is_err());
        assert!(check_unit(&[0.0, 0.0]).is_err());
    }
}
