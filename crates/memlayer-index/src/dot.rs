//! The dot product every vector comparison goes through.
//!
//! On x86-64 processors with AVX2 and FMA (x86-64-v3, detected once at run time) it runs as
//! 8-lane fused multiply-adds through `pulp`, which keeps the `unsafe` of target features
//! and intrinsics on its side: the workspace forbids our own. Elsewhere (older x86-64, and
//! other architectures, whose baseline the compiler targets) the portable loop below, which
//! the compiler vectorises for the baseline (SSE2 on x86-64). The binary stays one build for
//! every machine of the architecture; `-C target-cpu` would not.

use std::sync::LazyLock;

use pulp::{Simd, WithSimd};

/// AVX2 and FMA, when this processor has them.
#[cfg(target_arch = "x86_64")]
static X86_V3: LazyLock<Option<pulp::x86::V3>> = LazyLock::new(pulp::x86::V3::try_new);

/// Lanes processed per step of the portable loop. Sixteen independent accumulators let the
/// compiler keep four SSE2 registers (or two AVX registers) busy: floating-point addition
/// is not associative, so it may not reorder a single running sum into SIMD lanes, but it
/// may map an array of independent sums onto them.
const LANES: usize = 16;

/// The dot product of two equally long slices; cosine similarity on L2-normalised vectors.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = *X86_V3 {
        return Simd::vectorize(simd, Dot { a, b });
    }
    portable_dot(a, b)
}

/// [`dot`] for any SIMD instruction set `pulp` knows.
struct Dot<'a> {
    a: &'a [f32],
    b: &'a [f32],
}

impl WithSimd for Dot<'_> {
    type Output = f32;

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> f32 {
        let (a, a_rest) = S::as_simd_f32s(self.a);
        let (b, b_rest) = S::as_simd_f32s(self.b);
        // Four independent accumulators: a fused multiply-add waits for the one before it
        // on the same register (about four cycles), and two can start every cycle.
        let (a_quads, a_single) = a.as_chunks::<4>();
        let (b_quads, b_single) = b.as_chunks::<4>();
        let mut acc = [simd.splat_f32s(0.0); 4];
        for (x, y) in a_quads.iter().zip(b_quads) {
            for lane in 0..4 {
                acc[lane] = simd.mul_add_e_f32s(x[lane], y[lane], acc[lane]);
            }
        }
        for (&x, &y) in a_single.iter().zip(b_single) {
            acc[0] = simd.mul_add_e_f32s(x, y, acc[0]);
        }
        let sum = simd.add_f32s(simd.add_f32s(acc[0], acc[1]), simd.add_f32s(acc[2], acc[3]));
        let tail: f32 = a_rest.iter().zip(b_rest).map(|(x, y)| x * y).sum();
        simd.reduce_sum_f32s(sum) + tail
    }
}

/// [`dot`] without run-time dispatch, vectorised for the compilation target's baseline.
fn portable_dot(a: &[f32], b: &[f32]) -> f32 {
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
    fn every_path_matches_a_naive_sum_for_every_tail_length() {
        type Path = fn(&[f32], &[f32]) -> f32;
        let paths: [(&str, Path); 3] = [
            ("dispatched", dot),
            ("portable", portable_dot),
            ("pulp scalar", |a, b| {
                Dot { a, b }.with_simd(pulp::Scalar::new())
            }),
        ];
        for len in [0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 63, 384, 385] {
            let a: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..len).map(|i| (i as f32 * 0.11).cos()).collect();
            let naive: f64 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| f64::from(*x) * f64::from(*y))
                .sum();
            for (name, path) in paths {
                let found = f64::from(path(&a, &b));
                assert!(
                    (found - naive).abs() < 1e-4,
                    "{name}, len {len}: {found} vs {naive}"
                );
            }
        }
    }

    /// The dispatched path is the vectorised one wherever the processor allows it, so the
    /// test above covers it there (and the portable path elsewhere).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_and_fma_are_used_when_present() {
        let present = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma");
        assert_eq!(X86_V3.is_some(), present);
    }

    #[test]
    fn check_unit_accepts_unit_vectors_only() {
        assert!(check_unit(&[0.6, 0.8]).is_ok());
        assert!(check_unit(&[0.6, 0.9]).is_err());
        assert!(check_unit(&[f32::NAN, 1.0]).is_err());
        assert!(check_unit(&[0.0, 0.0]).is_err());
    }
}
