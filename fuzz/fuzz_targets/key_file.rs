//! The key file reader of memlayer-store on arbitrary bytes: a file that is not a key file is
//! refused, and in one that is, every slot reads as a key, free or torn, never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| memlayer_store::fuzzing::scan_key_file(data));
