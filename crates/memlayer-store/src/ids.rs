//! The ids of what a key names by number — memories, episodes and erasures — and the order
//! they are listed in.
//!
//! The ids are random: 53 bits from the operating system's random number generator. Counted
//! ids told a key how many memories or erasures every tenant had made (create two, subtract)
//! and let it walk the ids of others'. 53 bits keep them exact as JSON numbers in JavaScript
//! (`Number.MAX_SAFE_INTEGER` is 2^53 − 1), so the API keeps its integer type. A new id is
//! checked against the ids already stored in the transaction that stores it, and drawn again
//! on a collision, so ids are unique.
//!
//! Order is not the id's job any more: each kind keeps a sequence number apart from the id
//! (`meta.next_*_seq`), written beside the id where a listing needs it
//! (docs/storage-format.md). The sequence never leaves the store.

use redb::{ReadableTable, WriteTransaction};

use crate::tables::META;
use crate::{Result, StoreError};

/// Ids are below 2^ID_BITS: exact as JavaScript numbers.
const ID_BITS: u32 = 53;

/// Draws in a row that may all be taken before the generator is distrusted. With 53-bit ids
/// a store of a billion ids takes two in a row once in 2^65 draws; only a broken generator
/// gets here.
const MAX_DRAWS: usize = 8;

/// A random id in `0..2^53` from the operating system's generator (0 is never used; see
/// [`unused_id`]).
pub(crate) fn random_id() -> Result<u64> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|err| StoreError::Random(err.to_string()))?;
    Ok(u64::from_le_bytes(bytes) >> (64 - ID_BITS))
}

/// The first id from `draw` that is neither 0 (it means "not stored yet" to callers) nor one
/// `taken` reports. Call it in the write transaction that stores the id, with `taken`
/// reading that transaction, so no other write can take the id in between.
pub(crate) fn unused_id(
    mut draw: impl FnMut() -> Result<u64>,
    mut taken: impl FnMut(u64) -> Result<bool>,
) -> Result<u64> {
    for _ in 0..MAX_DRAWS {
        let id = draw()?;
        if id != 0 && !taken(id)? {
            return Ok(id);
        }
    }
    Err(StoreError::Random(format!(
        "{MAX_DRAWS} ids drawn in a row were all in use"
    )))
}

/// The next number of the sequence under `key` in `meta` (from 1), in `txn`.
pub(crate) fn next_seq(txn: &WriteTransaction, key: &str) -> Result<u64> {
    let mut meta = txn.open_table(META)?;
    let seq = meta.get(key)?.map_or(1, |value| value.value());
    meta.insert(key, seq + 1)?;
    Ok(seq)
}

/// A source of ids that returns `ids` in turn, for forcing collisions in tests.
#[cfg(test)]
pub(crate) fn scripted<const N: usize>(
    ids: [u64; N],
) -> impl FnMut() -> Result<u64> + Send + 'static {
    let mut ids = ids.into_iter();
    move || Ok(ids.next().expect("the script has an id for every draw"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ids_stay_below_2_to_the_53() {
        let ids: Vec<u64> = (0..1_000).map(|_| random_id().unwrap()).collect();
        assert!(ids.iter().all(|&id| id < 1 << ID_BITS));
        assert!(
            ids.iter().any(|&id| id >= 1 << (ID_BITS - 1)),
            "the top bit is used"
        );
    }

    #[test]
    fn taken_ids_and_zero_are_drawn_again_and_a_stuck_generator_is_an_error() {
        let taken = |id| Ok(id == 7);
        assert_eq!(unused_id(scripted([0, 7, 7, 9]), taken).unwrap(), 9);
        assert!(matches!(
            unused_id(|| Ok(7), taken),
            Err(StoreError::Random(_))
        ));
    }
}
