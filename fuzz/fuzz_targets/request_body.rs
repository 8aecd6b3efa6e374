//! Every request body the server deserialises: the first byte picks the body type
//! (`memlayer_server::fuzzing::BODIES`), the rest is the body, parsed and validated as the
//! handler does. Refusals are fine; a panic or a 5xx is a bug.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some((&kind, body)) = data.split_first() {
        let _ = memlayer_server::fuzzing::request_body(kind, body);
    }
});
