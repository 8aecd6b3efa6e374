//! The slots of a vector index: each vector held as one signed byte per component and one
//! `f32` scale (scalar quantization), a quarter of its `f32` size.
//!
//! A million 384-dimensional vectors took 1.5 GB as `f32`, most of a process's memory at
//! that size (docs/benchmarks.md); as codes they take 388 MB. A component is stored as
//! `round(x / scale)` with `scale = max |x| / 127`, so it is off by at most `scale / 2`, and
//! a similarity by at most `scale / 2` times the query's L1 norm (for unit vectors of
//! MiniLM's 384 dimensions about 0.002 at the worst, typically a tenth of that): rankings
//! change only between vectors whose cosines were that close. Queries stay `f32`; only the
//! stored side is quantized.

use crate::dot::{dot_code_pair, dot_codes};

/// The largest code: codes are symmetric around zero, so `-128` is never used.
const MAX_CODE: f32 = 127.0;

/// Every slot's codes and scale. A dead slot is all zeros (scale included): at similarity 0
/// to everything, and holding nothing of the vector it had.
#[derive(Debug, Default)]
pub(crate) struct Arena {
    dimension: usize,
    /// `slots × dimension` codes, slot by slot.
    codes: Vec<i8>,
    /// One scale per slot.
    scales: Vec<f32>,
}

impl Arena {
    pub(crate) fn new(dimension: usize) -> Self {
        Self::with_capacity(dimension, 0)
    }

    pub(crate) fn with_capacity(dimension: usize, slots: usize) -> Self {
        Self {
            dimension,
            codes: Vec::with_capacity(slots * dimension),
            scales: Vec::with_capacity(slots),
        }
    }

    /// Quantizes `vector` (of the arena's dimension) into a new slot at the end.
    pub(crate) fn push(&mut self, vector: &[f32]) {
        debug_assert_eq!(vector.len(), self.dimension);
        let (scale, codes) = quantized(vector);
        self.scales.push(scale);
        self.codes.extend(codes);
    }

    /// Appends a slot already quantized (read from a snapshot).
    pub(crate) fn push_codes(&mut self, scale: f32, codes: &[i8]) {
        debug_assert_eq!(codes.len(), self.dimension);
        self.scales.push(scale);
        self.codes.extend_from_slice(codes);
    }

    /// Slot `slot`'s scale and codes.
    pub(crate) fn get(&self, slot: usize) -> (f32, &[i8]) {
        let start = slot * self.dimension;
        (
            self.scales[slot],
            &self.codes[start..start + self.dimension],
        )
    }

    /// Whether slot `slot` holds what `vector` quantizes to.
    pub(crate) fn holds(&self, slot: usize, vector: &[f32]) -> bool {
        let (scale, codes) = self.get(slot);
        let (stored, stored_codes) = quantized(vector);
        scale == stored && codes.iter().copied().eq(stored_codes)
    }

    /// The cosine of `query` (a unit vector) and slot `slot`'s vector, as quantized.
    pub(crate) fn similarity(&self, query: &[f32], slot: usize) -> f32 {
        let (scale, codes) = self.get(slot);
        scale * dot_codes(query, codes)
    }

    /// The cosine of two slots' vectors, as quantized.
    pub(crate) fn similarity_of_slots(&self, a: usize, b: usize) -> f32 {
        let ((a_scale, a_codes), (b_scale, b_codes)) = (self.get(a), self.get(b));
        // An i32 of up to about 1e9 loses low bits as f32; they are far below the codes'
        // own rounding.
        a_scale * b_scale * dot_code_pair(a_codes, b_codes) as f32
    }

    /// Zeroes slot `slot`: what an erasure leaves of a vector.
    pub(crate) fn clear(&mut self, slot: usize) {
        let start = slot * self.dimension;
        self.codes[start..start + self.dimension].fill(0);
        self.scales[slot] = 0.0;
    }

    /// Copies slot `from` over slot `to` (a compaction moving a vector down).
    pub(crate) fn move_slot(&mut self, from: usize, to: usize) {
        let dimension = self.dimension;
        self.codes
            .copy_within(from * dimension..(from + 1) * dimension, to * dimension);
        self.scales[to] = self.scales[from];
    }

    /// Keeps the first `slots` slots, zeroing the rest first so that spare capacity keeps
    /// nothing of a vector.
    pub(crate) fn truncate(&mut self, slots: usize) {
        self.codes[slots * self.dimension..].fill(0);
        self.scales[slots..].fill(0.0);
        self.codes.truncate(slots * self.dimension);
        self.scales.truncate(slots);
    }
}

/// The scale a vector is stored with (its largest magnitude over [`MAX_CODE`]) and its codes:
/// each component divided by the scale, as the nearest code.
fn quantized(vector: &[f32]) -> (f32, impl Iterator<Item = i8> + '_) {
    let scale = vector.iter().fold(0.0f32, |max, x| max.max(x.abs())) / MAX_CODE;
    let inverse = if scale > 0.0 { scale.recip() } else { 0.0 };
    // Within ±127 by construction (±127.00001 after rounding of the division at most);
    // `as` saturates anyway.
    let codes = vector
        .iter()
        .map(move |&x| (x * inverse).round().clamp(-MAX_CODE, MAX_CODE) as i8);
    (scale, codes)
}

/// Checks a stored slot read back from a snapshot: a positive finite scale, and codes that
/// decode to a unit vector within what quantizing one can move its norm (`scale / 2` per
/// component at most).
pub(crate) fn check_codes(scale: f32, codes: &[i8]) -> Result<(), String> {
    if !(scale.is_finite() && scale > 0.0) {
        return Err(format!("scale {scale} is not a positive number"));
    }
    let squares: f32 = dot_code_pair(codes, codes) as f32;
    let norm = scale * squares.sqrt();
    let tolerance = scale / 2.0 * (codes.len() as f32).sqrt() + 1e-3;
    if (norm - 1.0).abs() > tolerance {
        return Err(format!("L2 norm is {norm}, expected 1"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dot::dot;

    fn unit(seed: u32, dimension: usize) -> Vec<f32> {
        let raw: Vec<f32> = (0..dimension)
            .map(|i| ((i as f32 + 1.0) * (seed as f32 * 0.731 + 0.17)).sin())
            .collect();
        let norm = dot(&raw, &raw).sqrt();
        raw.iter().map(|x| x / norm).collect()
    }

    #[test]
    fn similarities_stay_within_the_quantization_bound() {
        let dimension = 384;
        let mut arena = Arena::new(dimension);
        let vectors: Vec<Vec<f32>> = (0..40).map(|seed| unit(seed, dimension)).collect();
        for vector in &vectors {
            arena.push(vector);
        }
        for (slot, stored) in vectors.iter().enumerate() {
            let (scale, codes) = arena.get(slot);
            assert!(check_codes(scale, codes).is_ok());
            for (other, query) in vectors.iter().enumerate() {
                let exact = dot(query, stored);
                let l1: f32 = query.iter().map(|x| x.abs()).sum();
                let found = arena.similarity(query, slot);
                assert!(
                    (found - exact).abs() <= scale / 2.0 * l1 + 1e-5,
                    "query {other}, slot {slot}: {found} vs {exact}"
                );
                let pair = arena.similarity_of_slots(other, slot);
                assert!((pair - exact).abs() < 0.01, "{pair} vs {exact}");
            }
        }
    }

    #[test]
    fn a_slot_holds_what_its_vector_quantizes_to_and_nothing_once_cleared() {
        let mut arena = Arena::new(3);
        arena.push(&[0.6, 0.8, 0.0]);
        arena.push(&[0.0, 0.6, 0.8]);
        assert!(arena.holds(0, &[0.6, 0.8, 0.0]));
        assert!(!arena.holds(0, &[0.0, 0.6, 0.8]));
        assert_eq!(arena.get(0).1, [95, 127, 0]);

        arena.clear(0);
        assert_eq!(arena.get(0), (0.0, &[0i8, 0, 0][..]));
        assert_eq!(arena.similarity(&[0.6, 0.8, 0.0], 0), 0.0);

        arena.move_slot(1, 0);
        arena.truncate(1);
        assert_eq!(arena.scales.len(), 1);
        assert!(arena.holds(0, &[0.0, 0.6, 0.8]));
    }

    #[test]
    fn codes_that_do_not_decode_to_a_unit_vector_are_refused() {
        let mut arena = Arena::new(3);
        arena.push(&[0.6, 0.8, 0.0]);
        let (scale, codes) = arena.get(0);
        assert!(check_codes(scale, codes).is_ok());
        assert!(check_codes(scale * 2.0, codes).is_err());
        assert!(check_codes(0.0, codes).is_err());
        assert!(check_codes(f32::NAN, codes).is_err());
        assert!(check_codes(scale, &[95, 0, 0]).is_err());
    }
}
