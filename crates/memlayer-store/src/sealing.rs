//! The store file's sealed values: a session's message contents and metadata, vectors, runs
//! and summary are stored encrypted under the session's data key (`seal.rs`), kept in the key
//! file (`data_keys.rs`), so that an erasure of one message re-seals what is left of its session
//! under a new key and destroys the old one instead of compacting the whole store file.
//!
//! Each sealed value names its key (slot and generation) in plain and is bound to its place
//! by the associated data: the session's surrogate key (never reused), the message index (a
//! run's sequence number, a summary's last index) and the field. What a context's outline
//! reads (role, time, token count) and what a summary's range is stay plain, so neither needs
//! to open anything. Sessions stored before the store file sealed (no key in their record)
//! keep plain values, and their erasures compact the file as before.

use redb::{ReadableTable, Table, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::Result;
use crate::data_keys::{DataKeys, KeyOwner};
use crate::model::Role;
use crate::record::{
    MessageRecord, Record, RunRecord, SummaryRecord, VectorRecord, decode_body, encode_body,
};
use crate::seal::{DataKey, Field, Place};
use crate::tables::{MESSAGES, RUNS, SUMMARIES, VECTORS};

/// Which key a sealed value opens under: its slot in the key file and its generation (a
/// session's first key is generation 0; each re-key adds one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KeyRef {
    pub(crate) slot: u64,
    pub(crate) generation: u32,
}

impl KeyRef {
    /// The owner the key file records for this key of session `sid`.
    pub(crate) fn owner(self, sid: u64) -> KeyOwner {
        KeyOwner {
            sid,
            generation: self.generation,
        }
    }
}

/// What seals a session's new values: its current key, or nothing for a session stored before
/// the store file sealed.
pub(crate) struct Sealer {
    sid: u64,
    key: Option<(KeyRef, DataKey)>,
}

impl Sealer {
    /// The sealer of session `sid`, whose record names `key`.
    pub(crate) fn of(keys: &DataKeys, sid: u64, key: Option<KeyRef>) -> Result<Self> {
        let key = key
            .map(|key| Ok::<_, crate::StoreError>((key, open_key(keys, sid, key)?)))
            .transpose()?;
        Ok(Self { sid, key })
    }

    /// A sealer that stores values plain (a backup's, which has no key file).
    pub(crate) fn plain(sid: u64) -> Self {
        Self { sid, key: None }
    }

    /// A sealer under a key just created.
    pub(crate) fn new(sid: u64, key: KeyRef, data_key: DataKey) -> Self {
        Self {
            sid,
            key: Some((key, data_key)),
        }
    }

    pub(crate) fn message(&self, index: u64, record: &MessageRecord) -> Result<Vec<u8>> {
        let Some((key, data_key)) = &self.key else {
            return Ok(record.encode());
        };
        let body = (record.content.as_str(), record.metadata.as_str());
        Ok(SealedMessageRecord {
            role: record.role,
            timestamp: record.timestamp,
            token_count: record.token_count,
            key: *key,
            body: seal(
                data_key,
                self.sid,
                index,
                Field::Content,
                &encode_body(&body),
            )?,
        }
        .encode())
    }

    pub(crate) fn vector(&self, index: u64, record: &VectorRecord) -> Result<Vec<u8>> {
        let Some((key, data_key)) = &self.key else {
            return Ok(record.encode());
        };
        let components: Vec<u8> = record
            .components
            .iter()
            .flat_map(|c| c.to_le_bytes())
            .collect();
        Ok(SealedVectorRecord {
            model: record.model,
            role: record.role,
            timestamp: record.timestamp,
            key: *key,
            body: seal(data_key, self.sid, index, Field::Vector, &components)?,
        }
        .encode())
    }

    pub(crate) fn run(&self, seq: u64, record: &RunRecord) -> Result<Vec<u8>> {
        let Some((key, data_key)) = &self.key else {
            return Ok(record.encode());
        };
        Ok(SealedRunRecord {
            key: *key,
            body: seal(data_key, self.sid, seq, Field::RunContent, &record.encode())?,
        }
        .encode())
    }

    pub(crate) fn summary(&self, record: &SummaryRecord) -> Result<Vec<u8>> {
        let Some((key, data_key)) = &self.key else {
            return Ok(record.encode());
        };
        Ok(SealedSummaryRecord {
            first_index: record.first_index,
            last_index: record.last_index,
            created_at: record.created_at,
            key: *key,
            body: seal(
                data_key,
                self.sid,
                record.last_index,
                Field::Summary,
                record.text.as_bytes(),
            )?,
        }
        .encode())
    }

    /// The digest an idempotent append keeps of its request: under the session's key, so
    /// that once the key is destroyed no digest confirms a guess of an erased text.
    pub(crate) fn request_digest(&self, digest: [u8; 16]) -> [u8; 16] {
        match &self.key {
            None => digest,
            Some((_, data_key)) => {
                let keyed = data_key.idempotency_digest(&digest);
                keyed[..16]
                    .try_into()
                    .expect("an HMAC-SHA-256 has 32 bytes")
            }
        }
    }
}

/// Stores every message, vector, run and summary of session `sid` again through `sealer` (under
/// a new key, or plain), dropping the runs' free text with `redact` (see
/// [`RunRecord::redact`]); returns how many runs had any. The old values go whole, so what was
/// sealed under the old key is left in freed pages only.
pub(crate) fn rewrite_session(
    txn: &WriteTransaction,
    keys: &DataKeys,
    sid: u64,
    sealer: &Sealer,
    redact: bool,
) -> Result<u64> {
    let mut opener = Opener::new(keys, sid);
    let range = (sid, 0)..(sid + 1, 0);
    let mut messages = txn.open_table(MESSAGES)?;
    rewrite(&mut messages, range.clone(), |index, value| {
        sealer.message(index, &opener.message(index, value)?)
    })?;
    let mut vectors = txn.open_table(VECTORS)?;
    rewrite(&mut vectors, range.clone(), |index, value| {
        sealer.vector(index, &opener.vector(index, value)?)
    })?;
    let mut redacted = 0;
    let mut runs = txn.open_table(RUNS)?;
    rewrite(&mut runs, range, |seq, value| {
        let mut run = opener.run(seq, value)?;
        if redact {
            redacted += u64::from(run.redact());
        }
        sealer.run(seq, &run)
    })?;
    let mut summaries = txn.open_table(SUMMARIES)?;
    let summary = summaries
        .get(sid)?
        .map(|value| opener.summary(value.value()))
        .transpose()?;
    if let Some(summary) = summary {
        summaries.insert(sid, sealer.summary(&summary)?.as_slice())?;
    }
    Ok(redacted)
}

/// Replaces each value of `range` with what `new` makes of it.
fn rewrite(
    table: &mut Table<'_, (u64, u64), &'static [u8]>,
    range: std::ops::Range<(u64, u64)>,
    mut new: impl FnMut(u64, &[u8]) -> Result<Vec<u8>>,
) -> Result<()> {
    let values = table
        .range(range)?
        .map(|entry| {
            let (key, value) = entry?;
            let (sid, at) = key.value();
            Ok(((sid, at), new(at, value.value())?))
        })
        .collect::<Result<Vec<_>>>()?;
    for (key, value) in values {
        table.insert(key, value.as_slice())?;
    }
    Ok(())
}

/// Opens the values of session `sid` as they are stored, sealed or plain; remembers the last
/// key it read, since one session's values mostly share one.
pub(crate) struct Opener<'a> {
    keys: &'a DataKeys,
    sid: u64,
    last: Option<(KeyRef, DataKey)>,
}

impl<'a> Opener<'a> {
    pub(crate) fn new(keys: &'a DataKeys, sid: u64) -> Self {
        Self {
            keys,
            sid,
            last: None,
        }
    }

    /// This opener, moved to session `sid` (for reads that walk several sessions in key
    /// order).
    pub(crate) fn of(&mut self, sid: u64) -> &mut Self {
        if self.sid != sid {
            self.sid = sid;
            self.last = None;
        }
        self
    }

    pub(crate) fn message(&mut self, index: u64, bytes: &[u8]) -> Result<MessageRecord> {
        if !sealed(bytes, SealedMessageRecord::VERSION) {
            return MessageRecord::decode(bytes);
        }
        let sealed = SealedMessageRecord::decode(bytes)?;
        let body = self.open(sealed.key, index, Field::Content, &sealed.body)?;
        let (content, metadata): (String, String) = decode_body(MessageRecord::NAME, &body)?;
        Ok(MessageRecord {
            role: sealed.role,
            content,
            timestamp: sealed.timestamp,
            token_count: sealed.token_count,
            metadata,
        })
    }

    pub(crate) fn vector(&mut self, index: u64, bytes: &[u8]) -> Result<VectorRecord> {
        if !sealed(bytes, SealedVectorRecord::VERSION) {
            return VectorRecord::decode(bytes);
        }
        let sealed = SealedVectorRecord::decode(bytes)?;
        let body = self.open(sealed.key, index, Field::Vector, &sealed.body)?;
        if body.len() % 4 != 0 {
            return Err(crate::StoreError::Corrupted {
                what: VectorRecord::NAME,
                detail: format!("{} bytes of components", body.len()),
            });
        }
        Ok(VectorRecord {
            model: sealed.model,
            role: sealed.role,
            timestamp: sealed.timestamp,
            components: body
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect(),
        })
    }

    pub(crate) fn run(&mut self, seq: u64, bytes: &[u8]) -> Result<RunRecord> {
        if !sealed(bytes, SealedRunRecord::VERSION) {
            return RunRecord::decode(bytes);
        }
        let sealed = SealedRunRecord::decode(bytes)?;
        RunRecord::decode(&self.open(sealed.key, seq, Field::RunContent, &sealed.body)?)
    }

    pub(crate) fn summary(&mut self, bytes: &[u8]) -> Result<SummaryRecord> {
        if !sealed(bytes, SealedSummaryRecord::VERSION) {
            return SummaryRecord::decode(bytes);
        }
        let sealed = SealedSummaryRecord::decode(bytes)?;
        let text = self.open(sealed.key, sealed.last_index, Field::Summary, &sealed.body)?;
        Ok(SummaryRecord {
            text: String::from_utf8(text).map_err(|err| crate::StoreError::Corrupted {
                what: SummaryRecord::NAME,
                detail: err.to_string(),
            })?,
            first_index: sealed.first_index,
            last_index: sealed.last_index,
            created_at: sealed.created_at,
        })
    }

    fn open(&mut self, key: KeyRef, index: u64, field: Field, sealed: &[u8]) -> Result<Vec<u8>> {
        let data_key = match &self.last {
            Some((last, data_key)) if *last == key => data_key,
            _ => {
                &self
                    .last
                    .insert((key, open_key(self.keys, self.sid, key)?))
                    .1
            }
        };
        data_key.open(place(&self.sid.to_string(), index, field), sealed)
    }
}

/// What a stored message shows without opening or copying its content.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outline {
    pub(crate) role: Role,
    pub(crate) timestamp: u64,
    pub(crate) token_count: u32,
    /// The key it is sealed under; `None` for a plain one.
    pub(crate) key: Option<KeyRef>,
}

/// The outline of a stored message, sealed or plain.
pub(crate) fn outline(bytes: &[u8]) -> Result<Outline> {
    if !sealed(bytes, SealedMessageRecord::VERSION) {
        let (role, timestamp, token_count) = MessageRecord::decode_outline(bytes)?;
        return Ok(Outline {
            role,
            timestamp,
            token_count,
            key: None,
        });
    }
    let (view, used): (SealedMessageView<'_>, usize) =
        bincode::serde::borrow_decode_from_slice(&bytes[1..], bincode::config::standard())
            .map_err(|err| corrupted(SealedMessageRecord::NAME, err.to_string()))?;
    if used != bytes.len() - 1 {
        return Err(corrupted(
            SealedMessageRecord::NAME,
            format!("{} trailing bytes", bytes.len() - 1 - used),
        ));
    }
    Ok(Outline {
        role: view.role,
        timestamp: view.timestamp,
        token_count: view.token_count,
        key: Some(view.key),
    })
}

/// Borrowed twin of [`SealedMessageRecord`] for [`outline`]: same fields, same order.
#[derive(Deserialize)]
struct SealedMessageView<'a> {
    role: Role,
    timestamp: u64,
    token_count: u32,
    key: KeyRef,
    #[serde(borrow)]
    _body: &'a [u8],
}

/// Runs `read` again (from a new snapshot) when a key it needed was destroyed after its
/// snapshot was taken: an erasure re-keyed the session since, and a new snapshot finds its
/// values under the new key. A few times at most: each retry follows an erasure.
pub(crate) fn retry_destroyed<T>(mut read: impl FnMut() -> Result<T>) -> Result<T> {
    let mut tries = 0;
    loop {
        match read() {
            Err(crate::StoreError::KeyDestroyed { .. }) if tries < 3 => tries += 1,
            done => return done,
        }
    }
}

fn corrupted(what: &'static str, detail: String) -> crate::StoreError {
    crate::StoreError::Corrupted { what, detail }
}

/// The summary's range without opening its text.
pub(crate) fn summary_range(bytes: &[u8]) -> Result<(u64, u64)> {
    if sealed(bytes, SealedSummaryRecord::VERSION) {
        let sealed = SealedSummaryRecord::decode(bytes)?;
        return Ok((sealed.first_index, sealed.last_index));
    }
    let plain = SummaryRecord::decode(bytes)?;
    Ok((plain.first_index, plain.last_index))
}

/// Whether a value is a sealed record of `version` (the first byte of every record).
fn sealed(bytes: &[u8], version: u8) -> bool {
    bytes.first() == Some(&version)
}

fn open_key(keys: &DataKeys, sid: u64, key: KeyRef) -> Result<DataKey> {
    keys.key(key.slot, key.owner(sid))
}

fn seal(data_key: &DataKey, sid: u64, index: u64, field: Field, plain: &[u8]) -> Result<Vec<u8>> {
    data_key.seal(place(&sid.to_string(), index, field), plain)
}

/// Where a value of the store file belongs: its session's surrogate key, which the store
/// never reuses and which names one tenant's session, in place of PostgreSQL's tenant and
/// session id (an empty tenant, so that no value of one backend reads as the other's).
fn place(sid: &str, index: u64, field: Field) -> Place<'_> {
    Place {
        tenant: "",
        session_id: sid,
        index,
        field,
    }
}

/// A message of a sealed session: what its outline shows, plain; its content and metadata
/// sealed together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SealedMessageRecord {
    pub(crate) role: Role,
    pub(crate) timestamp: u64,
    pub(crate) token_count: u32,
    pub(crate) key: KeyRef,
    pub(crate) body: Vec<u8>,
}

impl Record for SealedMessageRecord {
    const VERSION: u8 = 2;
    const NAME: &'static str = "sealed message record";
}

/// A vector of a sealed session: what indexes filter on, plain; its components sealed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SealedVectorRecord {
    pub(crate) model: u32,
    pub(crate) role: Role,
    pub(crate) timestamp: u64,
    pub(crate) key: KeyRef,
    pub(crate) body: Vec<u8>,
}

impl Record for SealedVectorRecord {
    const VERSION: u8 = 2;
    const NAME: &'static str = "sealed vector record";
}

/// A run of a sealed session: the whole [`RunRecord`], sealed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SealedRunRecord {
    pub(crate) key: KeyRef,
    pub(crate) body: Vec<u8>,
}

impl Record for SealedRunRecord {
    const VERSION: u8 = 3;
    const NAME: &'static str = "sealed run record";
}

/// The summary of a sealed session: its range and time plain, its text sealed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SealedSummaryRecord {
    pub(crate) first_index: u64,
    pub(crate) last_index: u64,
    pub(crate) created_at: u64,
    pub(crate) key: KeyRef,
    pub(crate) body: Vec<u8>,
}

impl Record for SealedSummaryRecord {
    const VERSION: u8 = 2;
    const NAME: &'static str = "sealed summary record";
}
