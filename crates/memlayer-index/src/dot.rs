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
    reduce(acc) + tail
}

/// `Σ query[i] × codes[i]`: the dot product of a query with a quantized vector's codes,
/// before the vector's scale multiplies it in.
pub(crate) fn dot_codes(query: &[f32], codes: &[i8]) -> f32 {
    debug_assert_eq!(query.len(), codes.len());
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = *X86_V3 {
        return simd.vectorize(CodeDotV3 { simd, query, codes });
    }
    portable_dot_codes(query, codes)
}

/// `Σ a[i] × b[i]` of two quantized vectors' codes, exact. Each product is at most 127² and
/// [`crate::vector::MAX_DIMENSION`] of them fit an `i32` with room to spare.
pub(crate) fn dot_code_pair(a: &[i8], b: &[i8]) -> i32 {
    debug_assert_eq!(a.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = *X86_V3 {
        return Simd::vectorize(simd, CodePairDot { a, b });
    }
    portable_dot_code_pair(a, b)
}

/// [`dot_codes`] with AVX2 and FMA: eight codes at a time sign-extended to `i32` lanes,
/// converted to `f32`, multiplied into four independent accumulators (as [`Dot`]). Left to
/// the compiler, the same loop loaded the codes two at a time: 110 ns for 384 components
/// against 15 ns for [`dot`] (release build, this project's machines).
#[cfg(target_arch = "x86_64")]
struct CodeDotV3<'a> {
    simd: pulp::x86::V3,
    query: &'a [f32],
    codes: &'a [i8],
}

#[cfg(target_arch = "x86_64")]
impl pulp::NullaryFnOnce for CodeDotV3<'_> {
    type Output = f32;

    #[inline(always)]
    fn call(self) -> f32 {
        use pulp::bytemuck::cast;
        use pulp::{f32x8, i8x16};

        let simd = self.simd;
        let (query, query_rest) = self.query.as_chunks::<8>();
        let (codes, codes_rest) = self.codes.as_chunks::<8>();
        let widen = |codes: &[i8; 8]| {
            let mut low = [0i8; 16];
            low[..8].copy_from_slice(codes);
            simd.convert_i32x8_to_f32x8(simd.convert_i8x16_to_i32x8(cast::<_, i8x16>(low)))
        };
        let (query_quads, query_single) = query.as_chunks::<4>();
        let (codes_quads, codes_single) = codes.as_chunks::<4>();
        let mut acc = [simd.splat_f32x8(0.0); 4];
        for (x, y) in query_quads.iter().zip(codes_quads) {
            for lane in 0..4 {
                let x: f32x8 = cast(x[lane]);
                acc[lane] = simd.mul_add_f32x8(x, widen(&y[lane]), acc[lane]);
            }
        }
        for (x, y) in query_single.iter().zip(codes_single) {
            acc[0] = simd.mul_add_f32x8(cast(*x), widen(y), acc[0]);
        }
        let lanes: [[f32; 8]; 4] = acc.map(cast);
        let mut sum = [0.0f32; 8];
        for lanes in lanes {
            for (total, lane) in sum.iter_mut().zip(lanes) {
                *total += lane;
            }
        }
        sum.iter().sum::<f32>() + scalar_dot_codes(query_rest, codes_rest)
    }
}

/// [`dot_code_pair`] as a plain loop inside `pulp`'s target-feature context: inlined there
/// (every function on the way is `inline(always)`), the compiler vectorises the integer sum
/// for AVX2 on its own: 19 ns for 384 components.
struct CodePairDot<'a> {
    a: &'a [i8],
    b: &'a [i8],
}

impl WithSimd for CodePairDot<'_> {
    type Output = i32;

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) -> i32 {
        portable_dot_code_pair(self.a, self.b)
    }
}

fn portable_dot_codes(query: &[f32], codes: &[i8]) -> f32 {
    let (q_chunks, q_rest) = query.as_chunks::<LANES>();
    let (c_chunks, c_rest) = codes.as_chunks::<LANES>();
    let mut acc = [0.0f32; LANES];
    for (x, y) in q_chunks.iter().zip(c_chunks) {
        // Widened as a whole chunk first: converted lane by lane inside the sum, the codes
        // were loaded two at a time.
        let y: [f32; LANES] = std::array::from_fn(|lane| f32::from(y[lane]));
        for lane in 0..LANES {
            acc[lane] += x[lane] * y[lane];
        }
    }
    reduce(acc) + scalar_dot_codes(q_rest, c_rest)
}

/// The components left over after the last whole chunk, one at a time.
#[inline(always)]
fn scalar_dot_codes(query: &[f32], codes: &[i8]) -> f32 {
    query
        .iter()
        .zip(codes)
        .map(|(x, &y)| x * f32::from(y))
        .sum()
}

#[inline(always)]
fn portable_dot_code_pair(a: &[i8], b: &[i8]) -> i32 {
    // Integer addition is associative: the compiler vectorises this sum as it stands.
    a.iter()
        .zip(b)
        .map(|(&x, &y)| i32::from(x) * i32::from(y))
        .sum()
}

/// The sum of independent accumulators, pairwise: it keeps the rounding error of the
/// horizontal sum small.
#[inline(always)]
fn reduce(mut acc: [f32; LANES]) -> f32 {
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for lane in 0..width {
            acc[lane] += acc[lane + width];
        }
    }
    acc[0]
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

    #[test]
    fn code_products_match_a_naive_sum_for_every_tail_length() {
        for len in [0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 63, 384, 385] {
            let query: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin()).collect();
            let codes: Vec<i8> = (0..len).map(|i| ((i * 89) % 255) as i8).collect();
            let other: Vec<i8> = (0..len).map(|i| ((i * 37) % 255) as i8).collect();
            let naive: f64 = query
                .iter()
                .zip(&codes)
                .map(|(x, &y)| f64::from(*x) * f64::from(y))
                .sum();
            for (name, found) in [
                ("dispatched", dot_codes(&query, &codes)),
                ("portable", portable_dot_codes(&query, &codes)),
            ] {
                let found = f64::from(found);
                assert!(
                    (found - naive).abs() < 1e-2,
                    "{name}, len {len}: {found} vs {naive}"
                );
            }
            let exact: i32 = codes
                .iter()
                .zip(&other)
                .map(|(&x, &y)| i32::from(x) * i32::from(y))
                .sum();
            assert_eq!(dot_code_pair(&codes, &other), exact, "len {len}");
            assert_eq!(portable_dot_code_pair(&codes, &other), exact, "len {len}");
        }
        let extreme = vec![-127i8; crate::vector::MAX_DIMENSION];
        assert_eq!(
            dot_code_pair(&extreme, &extreme),
            127 * 127 * crate::vector::MAX_DIMENSION as i32
        );
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
