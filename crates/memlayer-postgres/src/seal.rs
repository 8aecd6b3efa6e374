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
//!
//! Each value is XChaCha20-Poly1305 with a random 24-byte nonce (large enough that random
//! nonces never repeat in practice, so no counter has to be kept consistent across nodes),
//! stored as nonce then ciphertext and tag. The associated data names the tenant, session,
//! index (a message's index, a run's position, a summary's last index, 0 for the session's
//! metadata) and field, so a ciphertext copied into another row, or a content swapped with a
//! metadata, fails to open instead of being read as that row's.

use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::{Key, KeyInit, XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::{PostgresError, Result};

/// Bytes of a data key.
pub(crate) const KEY_LEN: usize = 32;
const NONCE_LEN: usize = 24;
/// Keeps the key's HMAC digests apart from any other use of it.
const IDEMPOTENCY_DIGEST_LABEL: &[u8] = b"memlayer-postgres idempotency digest v1\0";
/// Tag of the associated data's layout, so a later layout can never collide with this one.
const AAD_VERSION: &[u8] = b"memlayer-postgres seal v1\0";

/// Which value is sealed; part of the associated data. Never renumber (see `code`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Field {
    /// A message's content.
    Content,
    /// A message's metadata.
    Metadata,
    /// The session's metadata, at index 0.
    SessionMetadata,
    /// A run's content, at its position.
    RunContent,
    /// A run's tool calls.
    RunToolCalls,
    /// A run's error.
    RunError,
    /// A run's metadata.
    RunMetadata,
    /// The summary's text, at its last index.
    Summary,
    /// A tenant's or agent's settings document: the place's session is the document's
    /// scope (`*` or `a/<agent_id>`), at index 0.
    Settings,
    /// A long-term memory's body, at its id, its user as the session id.
    Memory,
    /// An episode's body, at its id, its user as the session id.
    Episode,
    /// A session memory's body, at 0, "user/agent" as the session id.
    SessionMemory,
    /// A message's embedding (src/embeddings.rs), derived from its content.
    Vector,
}

impl Field {
    /// The field's byte in the associated data.
    fn code(self) -> u8 {
        match self {
            Self::Content => 0,
            Self::Metadata => 1,
            Self::SessionMetadata => 2,
            Self::RunContent => 3,
            Self::RunToolCalls => 4,
            Self::RunError => 5,
            Self::RunMetadata => 6,
            Self::Summary => 7,
            Self::Settings => 8,
            Self::Memory => 9,
            Self::Episode => 10,
            Self::SessionMemory => 11,
            Self::Vector => 12,
        }
    }

    /// What a value that fails to open is called in the error.
    fn what(self) -> &'static str {
        match self {
            Self::Content | Self::Metadata => "sealed message",
            Self::SessionMetadata => "sealed session metadata",
            Self::RunContent | Self::RunToolCalls | Self::RunError | Self::RunMetadata => {
                "sealed run"
            }
            Self::Summary => "sealed summary",
            Self::Settings => "sealed settings",
            Self::Memory => "sealed memory",
            Self::Episode => "sealed episode",
            Self::SessionMemory => "sealed session memory",
            Self::Vector => "sealed vector",
        }
    }
}

/// Where a sealed value belongs; the associated data binds it there.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place<'a> {
    pub(crate) tenant: &'a str,
    pub(crate) session_id: &'a str,
    pub(crate) index: u64,
    pub(crate) field: Field,
}

impl Place<'_> {
    fn associated_data(&self) -> Vec<u8> {
        let mut aad = Vec::with_capacity(AAD_VERSION.len() + 32 + self.tenant.len());
        aad.extend_from_slice(AAD_VERSION);
        // Length prefixes keep the parts apart: ("ab", "c") and ("a", "bc") differ.
        for part in [self.tenant, self.session_id] {
            aad.extend_from_slice(&(part.len() as u64).to_le_bytes());
            aad.extend_from_slice(part.as_bytes());
        }
        aad.extend_from_slice(&self.index.to_le_bytes());
        aad.push(self.field.code());
        aad
    }
}

/// A session's data key.
#[derive(Clone)]
pub(crate) struct DataKey {
    pub(crate) id: uuid::Uuid,
    bytes: [u8; KEY_LEN],
}

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key itself: debug output lands in logs.
        f.debug_struct("DataKey").field("id", &self.id).finish()
    }
}

impl DataKey {
    /// A new random key under a new random id.
    pub(crate) fn generate() -> Result<Self> {
        let mut bytes = [0; KEY_LEN];
        getrandom::fill(&mut bytes).map_err(|source| PostgresError::Random { source })?;
        Ok(Self {
            id: uuid::Uuid::new_v4(),
            bytes,
        })
    }

    /// The key `id` as stored.
    pub(crate) fn from_stored(id: uuid::Uuid, bytes: &[u8]) -> Result<Self> {
        let bytes = bytes.try_into().map_err(|_| PostgresError::Corrupted {
            what: "data key",
            detail: format!("{} bytes, not {KEY_LEN}", bytes.len()),
        })?;
        Ok(Self { id, bytes })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(Key::from_slice(&self.bytes))
    }

    /// The idempotency digest of an append whose request digest is `request`
    /// (`memlayer_store::Append::request_digest`): keyed with this key, so that once an
    /// erasure destroyed it, the digests old row versions keep confirm no guess of the
    /// erased text.
    pub(crate) fn idempotency_digest(&self, request: &[u8]) -> Vec<u8> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.bytes)
            .expect("HMAC takes keys of any length");
        mac.update(IDEMPOTENCY_DIGEST_LABEL);
        mac.update(request);
        mac.finalize().into_bytes().to_vec()
    }

    /// `plaintext` encrypted for `place`: nonce, then ciphertext and tag.
    pub(crate) fn seal(&self, place: Place<'_>, plaintext: &[u8]) -> Result<Vec<u8>> {
        let mut nonce = [0; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|source| PostgresError::Random { source })?;
        let aad = place.associated_data();
        let ciphertext = self
            .cipher()
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plaintext,
                    aad: &aad,
                },
            )
            // Encryption fails only for inputs of 256 GiB and more.
            .map_err(|_| memlayer_store::StoreError::InvalidInput {
                field: "content",
                reason: "too long to encrypt".into(),
            })?;
        let mut sealed = Vec::with_capacity(NONCE_LEN + ciphertext.len());
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(&ciphertext);
        Ok(sealed)
    }

    /// The plaintext of a value sealed for `place`; an error if it was sealed for another
    /// place, under another key, or altered.
    pub(crate) fn open(&self, place: Place<'_>, sealed: &[u8]) -> Result<Vec<u8>> {
        let refused = |detail: &str| PostgresError::Corrupted {
            what: place.field.what(),
            detail: format!("{:?} at {}: {detail}", place.field, place.index),
        };
        if sealed.len() < NONCE_LEN {
            return Err(refused("shorter than a nonce"));
        }
        let (nonce, ciphertext) = sealed.split_at(NONCE_LEN);
        let aad = place.associated_data();
        self.cipher()
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: &aad,
                },
            )
            .map_err(|_| refused("does not open under the session's key at this place"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(index: u64, field: Field) -> Place<'static> {
        Place {
            tenant: "t",
            session_id: "s",
            index,
            field,
        }
    }

    #[test]
    fn a_sealed_value_opens_only_at_its_place_under_its_key() {
        let key = DataKey::generate().unwrap();
        let sealed = key.seal(place(3, Field::Content), b"hello").unwrap();
        assert!(!sealed.windows(5).any(|w| w == b"hello"));
        assert_eq!(
            key.open(place(3, Field::Content), &sealed).unwrap(),
            b"hello"
        );
        for wrong in [
            place(4, Field::Content),
            place(3, Field::Metadata),
            place(3, Field::SessionMetadata),
            place(3, Field::RunContent),
            place(3, Field::Summary),
            place(3, Field::Vector),
        ] {
            assert!(key.open(wrong, &sealed).is_err(), "{wrong:?}");
        }
        let moved = Place {
            session_id: "s2",
            ..place(3, Field::Content)
        };
        assert!(key.open(moved, &sealed).is_err());
        let other = DataKey::generate().unwrap();
        assert!(other.open(place(3, Field::Content), &sealed).is_err());
        let mut altered = sealed.clone();
        *altered.last_mut().unwrap() ^= 1;
        assert!(key.open(place(3, Field::Content), &altered).is_err());
    }

    #[test]
    fn two_seals_of_one_value_differ() {
        let key = DataKey::generate().unwrap();
        let a = key.seal(place(0, Field::Content), b"same").unwrap();
        let b = key.seal(place(0, Field::Content), b"same").unwrap();
        assert_ne!(a, b, "a fresh nonce per value");
    }
}
