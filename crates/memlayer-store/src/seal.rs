//! Sealed values: what an erasure must be able to make unreadable without rewriting the file
//! that holds it is stored encrypted under a data key, and the erasure destroys the key
//! (crypto-shredding). The PostgreSQL backend seals every session's content this way
//! (memlayer-postgres `seal.rs` and `erasure.rs`), since PostgreSQL never overwrites what it
//! deletes.
//!
//! Each value is XChaCha20-Poly1305 with a random 24-byte nonce (large enough that random
//! nonces never repeat in practice, so no counter has to be kept consistent across nodes or
//! files), stored as nonce then ciphertext and tag. The associated data names the tenant,
//! session, index (a message's index, a run's position, a summary's last index, 0 for the
//! session's metadata) and field, so a ciphertext copied into another place, or a content
//! swapped with a metadata, fails to open instead of being read as that place's.

use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::{Key, KeyInit, XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::{Result, StoreError};

/// Bytes of a data key.
pub const KEY_LEN: usize = 32;
const NONCE_LEN: usize = 24;
// The labels below say "memlayer-postgres" because that backend sealed first: its stored
// values were made under them, so they stay.
/// Keeps the key's HMAC digests apart from any other use of it.
const IDEMPOTENCY_DIGEST_LABEL: &[u8] = b"memlayer-postgres idempotency digest v1\0";
/// Tag of the associated data's layout, so a later layout can never collide with this one.
const AAD_VERSION: &[u8] = b"memlayer-postgres seal v1\0";

/// Which value is sealed; part of the associated data. Never renumber (see `code`).
#[derive(Debug, Clone, Copy)]
pub enum Field {
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
pub struct Place<'a> {
    /// The tenant.
    pub tenant: &'a str,
    /// The session, or what a [`Field`] names in its place.
    pub session_id: &'a str,
    /// The position in the session (see [`Field`]).
    pub index: u64,
    /// Which value of that place.
    pub field: Field,
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

/// A data key: 256 random bits. Whoever stores it names it (PostgreSQL by a random id, the
/// store file by its session and generation).
#[derive(Clone)]
pub struct DataKey {
    bytes: [u8; KEY_LEN],
}

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key itself: debug output lands in logs.
        f.write_str("DataKey")
    }
}

impl DataKey {
    /// A new random key.
    pub fn generate() -> Result<Self> {
        let mut bytes = [0; KEY_LEN];
        random_bytes(&mut bytes)?;
        Ok(Self { bytes })
    }

    /// A key as stored; an error unless it is [`KEY_LEN`] bytes.
    pub fn from_stored(bytes: &[u8]) -> Result<Self> {
        let bytes = bytes.try_into().map_err(|_| StoreError::Corrupted {
            what: "data key",
            detail: format!("{} bytes, not {KEY_LEN}", bytes.len()),
        })?;
        Ok(Self { bytes })
    }

    /// The key's bytes, to store it.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(Key::from_slice(&self.bytes))
    }

    /// The idempotency digest of an append whose request digest is `request`
    /// ([`crate::Append::request_digest`]): keyed with this key, so that once an
    /// erasure destroyed it, the digests old row versions keep confirm no guess of the
    /// erased text.
    pub fn idempotency_digest(&self, request: &[u8]) -> Vec<u8> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.bytes)
            .expect("HMAC takes keys of any length");
        mac.update(IDEMPOTENCY_DIGEST_LABEL);
        mac.update(request);
        mac.finalize().into_bytes().to_vec()
    }

    /// `plaintext` encrypted for `place`: nonce, then ciphertext and tag.
    pub fn seal(&self, place: Place<'_>, plaintext: &[u8]) -> Result<Vec<u8>> {
        let mut nonce = [0; NONCE_LEN];
        random_bytes(&mut nonce)?;
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
            .map_err(|_| StoreError::InvalidInput {
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
    pub fn open(&self, place: Place<'_>, sealed: &[u8]) -> Result<Vec<u8>> {
        let refused = |detail: &str| StoreError::Corrupted {
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

fn random_bytes(into: &mut [u8]) -> Result<()> {
    getrandom::fill(into).map_err(|err| StoreError::Random(err.to_string()))
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
