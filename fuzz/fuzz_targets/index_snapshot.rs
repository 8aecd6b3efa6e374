//! The vector index snapshot reader on arbitrary bytes. The first byte picks the dimension
//! (1 to 16; the format is the same at 384, only slower to fuzz), the rest is the file. A
//! damaged file must be an error — the caller then rebuilds from the store — never a panic
//! or an allocation the file's length does not justify.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some((&dimension, file)) = data.split_first() {
        let dimension = usize::from(dimension % 16) + 1;
        let _ = memlayer_index::fuzzing::load_snapshot(file, dimension);
    }
});
