//! Sealed content: a message's content and metadata, a session's metadata, a run's texts and a
//! summary are stored only encrypted, under a data key of their session.
//!
//! PostgreSQL never overwrites what it deletes: a deleted or updated tuple stays in its page
//! until vacuum reuses the space, and its bytes also live on in the write-ahead log, in
//! recycled WAL segments, in TOAST chunks and in full-page images, none of which are zeroed.
//! An erasure therefore cannot make deleted text unrecoverable by deleting rows. It destroys
//! keys instead (crypto-shredding): every session has its own random 256-bit key in
//! `data_keys`, whose small hash partitions are all that must be rewritten to get rid of a
//! destroyed key's bytes; the ciphertext left behind anywhere is then noise (`erasure.rs`).
//! The cipher and the places a value is bound to are memlayer-store's (`memlayer_store::seal`),
//! shared with the store file; here a key is also named by a random id, its row's.

pub(crate) use memlayer_store::seal::{Field, Place};

use memlayer_store::StoreError;

use crate::{PostgresError, Result};

/// A data key and the id of its row in `data_keys`.
#[derive(Debug, Clone)]
pub(crate) struct DataKey {
    pub(crate) id: uuid::Uuid,
    key: memlayer_store::seal::DataKey,
}

impl DataKey {
    /// A new random key under a new random id.
    pub(crate) fn generate() -> Result<Self> {
        Ok(Self {
            id: uuid::Uuid::new_v4(),
            key: memlayer_store::seal::DataKey::generate()?,
        })
    }

    /// The key `id` as stored.
    pub(crate) fn from_stored(id: uuid::Uuid, bytes: &[u8]) -> Result<Self> {
        Ok(Self {
            id,
            key: damaged(memlayer_store::seal::DataKey::from_stored(bytes))?,
        })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        self.key.bytes()
    }

    /// See [`memlayer_store::seal::DataKey::idempotency_digest`].
    pub(crate) fn idempotency_digest(&self, request: &[u8]) -> Vec<u8> {
        self.key.idempotency_digest(request)
    }

    /// See [`memlayer_store::seal::DataKey::seal`].
    pub(crate) fn seal(&self, place: Place<'_>, plaintext: &[u8]) -> Result<Vec<u8>> {
        Ok(self.key.seal(place, plaintext)?)
    }

    /// See [`memlayer_store::seal::DataKey::open`].
    pub(crate) fn open(&self, place: Place<'_>, sealed: &[u8]) -> Result<Vec<u8>> {
        damaged(self.key.open(place, sealed))
    }
}

/// A stored value this backend's data do not explain is [`PostgresError::Corrupted`], as every
/// other damage found in the database.
fn damaged<T>(result: memlayer_store::Result<T>) -> Result<T> {
    result.map_err(|err| match err {
        StoreError::Corrupted { what, detail } => PostgresError::Corrupted { what, detail },
        other => other.into(),
    })
}
