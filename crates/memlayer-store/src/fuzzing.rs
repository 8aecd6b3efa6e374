//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`; no memlayer binary enables
//! it). They reach the private record decoders without making the on-disk format public API.

use crate::Result;
use crate::episodes::EpisodeRecord;
use crate::keys::KeyRecord;
use crate::memories::MemoryRecord;
use crate::record::{
    IdempotencyRecord, MessageRecord, ModelRecord, OutboxRecord, Record, RunRecord, SessionRecord,
    SummaryRecord, VectorRecord,
};
use crate::session_memory::SessionMemoryRecord;

/// Decodes `bytes` as every stored record type. A decoder may refuse the bytes (corruption,
/// a newer version) but must not panic; whatever it accepts must encode and decode back to
/// the same bytes, or a rewrite of the record would change what it says.
pub fn decode_records(bytes: &[u8]) {
    check::<SessionRecord>(bytes);
    check::<MessageRecord>(bytes);
    check::<RunRecord>(bytes);
    check::<IdempotencyRecord>(bytes);
    check::<OutboxRecord>(bytes);
    check::<VectorRecord>(bytes);
    check::<ModelRecord>(bytes);
    check::<SummaryRecord>(bytes);
    check::<KeyRecord>(bytes);
    check::<MemoryRecord>(bytes);
    check::<SessionMemoryRecord>(bytes);
    check::<EpisodeRecord>(bytes);
}

fn check<R: Record>(bytes: &[u8]) {
    let Ok(record) = R::decode(bytes) else {
        return;
    };
    // Bytes, not values, are compared: f32 components may be NaN, which is never equal to
    // itself.
    let encoded = record.encode();
    let again: Result<R> = R::decode(&encoded);
    let again = again.unwrap_or_else(|err| panic!("{} re-decodes as {err}", R::NAME));
    assert_eq!(again.encode(), encoded, "{} does not round-trip", R::NAME);
}
