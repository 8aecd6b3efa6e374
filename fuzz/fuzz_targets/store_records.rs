//! The stored-record decoders of memlayer-store on arbitrary bytes: refuse or decode, never
//! panic or over-allocate, and what decodes must round-trip.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| memlayer_store::fuzzing::decode_records(data));
