//! The on-disk form of every stored value: one format-version byte, then the record in
//! bincode (standard configuration, varint integers).
//!
//! Records are private to this crate; `model` converts them to the public types. Metadata is
//! kept as JSON text because bincode cannot decode self-describing `serde_json::Value`s.
//! When a record's layout changes, bump its `VERSION` and teach `decode` the old layout;
//! docs/storage-format.md lists every version.

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::model::{Metadata, Role, RunStatus};
use crate::sealing::KeyRef;
use crate::{Result, StoreError};

/// Decoding refuses length prefixes beyond this, so a damaged record cannot make the decoder
/// allocate gigabytes.
const DECODE_LIMIT: usize = 256 << 20;

fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<DECODE_LIMIT>()
}

/// A value stored in a table, with its current format version.
pub(crate) trait Record: Serialize + DeserializeOwned {
    /// Written as the first byte of every encoded value.
    const VERSION: u8;
    /// Names the record in errors.
    const NAME: &'static str;

    fn encode(&self) -> Vec<u8> {
        let mut out = vec![Self::VERSION];
        bincode::serde::encode_into_std_write(self, &mut out, bincode_config())
            .expect("encoding into a Vec cannot fail");
        out
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        let corrupted = |detail: String| StoreError::Corrupted {
            what: Self::NAME,
            detail,
        };
        let (&version, body) = bytes
            .split_first()
            .ok_or_else(|| corrupted("empty value".into()))?;
        if version > Self::VERSION {
            return Err(StoreError::NewerFormat {
                found: version.into(),
                supported: Self::VERSION.into(),
            });
        }
        if version < Self::VERSION {
            return Self::upgrade(version, body);
        }
        decode_body(Self::NAME, body)
    }

    /// Decodes a value written with an older `version` of the record. Records that never
    /// changed have no older version: anything else is corruption.
    fn upgrade(version: u8, _body: &[u8]) -> Result<Self> {
        Err(StoreError::Corrupted {
            what: Self::NAME,
            detail: format!("unknown record version {version}"),
        })
    }
}

/// `value` in bincode, as [`decode_body`] reads it.
pub(crate) fn encode_body(value: &impl Serialize) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, bincode_config()).expect("encoding into a Vec cannot fail")
}

/// Decodes one whole bincode body; trailing bytes are corruption.
pub(crate) fn decode_body<T: DeserializeOwned>(what: &'static str, body: &[u8]) -> Result<T> {
    let corrupted = |detail: String| StoreError::Corrupted { what, detail };
    let (record, used) = bincode::serde::decode_from_slice(body, bincode_config())
        .map_err(|err| corrupted(err.to_string()))?;
    if used != body.len() {
        return Err(corrupted(format!("{} trailing bytes", body.len() - used)));
    }
    Ok(record)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SessionRecord {
    /// Surrogate key of the session in the turn, run and idempotency tables. Never reused, so
    /// a session deleted and created again under the same id starts empty.
    pub(crate) sid: u64,
    pub(crate) user_id: String,
    pub(crate) agent_id: String,
    pub(crate) flow_id: Option<String>,
    pub(crate) created_at: u64,
    pub(crate) updated_at: u64,
    pub(crate) metadata: String,
    /// Index the next message gets; equals the number of messages.
    pub(crate) next_index: u64,
    /// Sequence number the next run gets.
    pub(crate) next_run: u64,
    pub(crate) last_role: Option<Role>,
    /// Index from which context loads start (version 2): `clear` moves it to the end;
    /// older messages stay stored for audit and search.
    pub(crate) load_from: u64,
    /// How many of its messages were erased one by one (version 3), so that what was read
    /// of the session before can be known to still hold without reading it again: messages
    /// are never changed, only appended after `next_index` or erased.
    pub(crate) erased: u64,
    /// The data key its new values are sealed under (version 4, `sealing.rs`); `None` for a
    /// session stored before, whose values are plain.
    pub(crate) key: Option<KeyRef>,
}

impl Record for SessionRecord {
    const VERSION: u8 = 4;
    const NAME: &'static str = "session record";

    fn upgrade(version: u8, body: &[u8]) -> Result<Self> {
        let v3 = match version {
            1 | 2 => {
                let v2: SessionRecordV2 = match version {
                    1 => decode_body::<SessionRecordV1>(Self::NAME, body)?.into(),
                    _ => decode_body(Self::NAME, body)?,
                };
                // Erasures before version 3 were not counted. Counting from 0 is sound: the
                // count is only compared with itself, read earlier from the same record.
                SessionRecordV3 {
                    sid: v2.sid,
                    user_id: v2.user_id,
                    agent_id: v2.agent_id,
                    flow_id: v2.flow_id,
                    created_at: v2.created_at,
                    updated_at: v2.updated_at,
                    metadata: v2.metadata,
                    next_index: v2.next_index,
                    next_run: v2.next_run,
                    last_role: v2.last_role,
                    load_from: v2.load_from,
                    erased: 0,
                }
            }
            3 => decode_body(Self::NAME, body)?,
            other => {
                return Err(StoreError::Corrupted {
                    what: Self::NAME,
                    detail: format!("unknown record version {other}"),
                });
            }
        };
        Ok(Self {
            sid: v3.sid,
            user_id: v3.user_id,
            agent_id: v3.agent_id,
            flow_id: v3.flow_id,
            created_at: v3.created_at,
            updated_at: v3.updated_at,
            metadata: v3.metadata,
            next_index: v3.next_index,
            next_run: v3.next_run,
            last_role: v3.last_role,
            load_from: v3.load_from,
            erased: v3.erased,
            key: None,
        })
    }
}

/// `SessionRecord` as version 3 wrote it: without `key`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SessionRecordV3 {
    pub(crate) sid: u64,
    pub(crate) user_id: String,
    pub(crate) agent_id: String,
    pub(crate) flow_id: Option<String>,
    pub(crate) created_at: u64,
    pub(crate) updated_at: u64,
    pub(crate) metadata: String,
    pub(crate) next_index: u64,
    pub(crate) next_run: u64,
    pub(crate) last_role: Option<Role>,
    pub(crate) load_from: u64,
    pub(crate) erased: u64,
}

impl From<SessionRecordV1> for SessionRecordV2 {
    fn from(v1: SessionRecordV1) -> Self {
        Self {
            sid: v1.sid,
            user_id: v1.user_id,
            agent_id: v1.agent_id,
            flow_id: v1.flow_id,
            created_at: v1.created_at,
            updated_at: v1.updated_at,
            metadata: v1.metadata,
            next_index: v1.next_index,
            next_run: v1.next_run,
            last_role: v1.last_role,
            load_from: 0,
        }
    }
}

/// `SessionRecord` as version 2 wrote it: without `erased`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SessionRecordV2 {
    pub(crate) sid: u64,
    pub(crate) user_id: String,
    pub(crate) agent_id: String,
    pub(crate) flow_id: Option<String>,
    pub(crate) created_at: u64,
    pub(crate) updated_at: u64,
    pub(crate) metadata: String,
    pub(crate) next_index: u64,
    pub(crate) next_run: u64,
    pub(crate) last_role: Option<Role>,
    pub(crate) load_from: u64,
}

/// `SessionRecord` as version 1 wrote it: without `load_from`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SessionRecordV1 {
    pub(crate) sid: u64,
    pub(crate) user_id: String,
    pub(crate) agent_id: String,
    pub(crate) flow_id: Option<String>,
    pub(crate) created_at: u64,
    pub(crate) updated_at: u64,
    pub(crate) metadata: String,
    pub(crate) next_index: u64,
    pub(crate) next_run: u64,
    pub(crate) last_role: Option<Role>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MessageRecord {
    pub(crate) role: Role,
    pub(crate) content: String,
    pub(crate) timestamp: u64,
    pub(crate) token_count: u32,
    pub(crate) metadata: String,
}

impl Record for MessageRecord {
    const VERSION: u8 = 1;
    const NAME: &'static str = "message record";
}

/// The fields of a message outline ([`crate::MessageOutline`]), decoded without copying the
/// content or parsing the metadata: a context reads the outline of every message of a long
/// session but shows the content of only the last few, and copying 2,000 contents took most
/// of a context's store read (docs/benchmarks.md).
///
/// Borrowed twin of [`MessageRecord`]: bincode has no field names, so the fields must stay
/// in the same order with the same types (`outline_decodes_what_the_record_encodes` checks).
#[derive(Deserialize)]
struct MessageRecordView<'a> {
    role: Role,
    #[serde(borrow)]
    _content: &'a str,
    timestamp: u64,
    token_count: u32,
    #[serde(borrow)]
    _metadata: &'a str,
}

impl MessageRecord {
    /// The role, timestamp and token count of an encoded message record.
    pub(crate) fn decode_outline(bytes: &[u8]) -> Result<(Role, u64, u32)> {
        match bytes.split_first() {
            Some((&Self::VERSION, body)) => {
                let corrupted = |detail: String| StoreError::Corrupted {
                    what: Self::NAME,
                    detail,
                };
                let (view, used): (MessageRecordView<'_>, usize) =
                    bincode::serde::borrow_decode_from_slice(body, bincode_config())
                        .map_err(|err| corrupted(err.to_string()))?;
                if used != body.len() {
                    return Err(corrupted(format!("{} trailing bytes", body.len() - used)));
                }
                Ok((view.role, view.timestamp, view.token_count))
            }
            // Another version (or an empty value): the full decoder upgrades or refuses it.
            _ => {
                let record = Self::decode(bytes)?;
                Ok((record.role, record.timestamp, record.token_count))
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RunRecord {
    pub(crate) run_id: String,
    pub(crate) status: RunStatus,
    pub(crate) content: Option<String>,
    /// JSON array text.
    pub(crate) tool_calls: String,
    pub(crate) error: Option<String>,
    pub(crate) metadata: String,
    pub(crate) created_at: u64,
    /// Set when a message of the session was erased after the run was recorded: the free
    /// text above (content, error, tool calls, metadata) was dropped, since memlayer cannot
    /// tell which of it the run copied from which message. Added in version 2.
    pub(crate) redacted: bool,
}

/// Version 1 of [`RunRecord`]: no `redacted`.
#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct RunRecordV1 {
    run_id: String,
    status: RunStatus,
    content: Option<String>,
    tool_calls: String,
    error: Option<String>,
    metadata: String,
    created_at: u64,
}

impl Record for RunRecord {
    const VERSION: u8 = 2;
    const NAME: &'static str = "run record";

    fn upgrade(version: u8, body: &[u8]) -> Result<Self> {
        if version != 1 {
            return Err(StoreError::Corrupted {
                what: Self::NAME,
                detail: format!("unknown record version {version}"),
            });
        }
        let v1: RunRecordV1 = decode_body(Self::NAME, body)?;
        Ok(Self {
            run_id: v1.run_id,
            status: v1.status,
            content: v1.content,
            tool_calls: v1.tool_calls,
            error: v1.error,
            metadata: v1.metadata,
            created_at: v1.created_at,
            redacted: false,
        })
    }
}

impl RunRecord {
    /// Drops the run's free text, keeping its id, status and time; `false` if it was
    /// redacted already.
    pub(crate) fn redact(&mut self) -> bool {
        if self.redacted {
            return false;
        }
        self.content = None;
        self.error = None;
        self.tool_calls = "[]".to_owned();
        self.metadata = "{}".to_owned();
        self.redacted = true;
        true
    }
}

/// The request digest of an idempotent append one of whose messages was erased. A replay
/// under its key answers the first result whatever its body: comparing bodies would tell a
/// right guess of the erased text (replayed) from a wrong one (a conflict).
pub(crate) const ERASED_DIGEST: [u8; 16] = [0; 16];

/// What an idempotent append returned the first time, and a digest of what it was asked, so
/// a different request reusing the key is told so instead of silently getting another answer.
/// Once a message the append stored is erased, the digest is [`ERASED_DIGEST`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct IdempotencyRecord {
    pub(crate) request_digest: [u8; 16],
    pub(crate) first_index: u64,
    pub(crate) count: u64,
    pub(crate) created_session: bool,
}

impl Record for IdempotencyRecord {
    const VERSION: u8 = 1;
    const NAME: &'static str = "idempotency record";
}

/// One append waiting to be embedded: the messages `first_index..first_index + count` of
/// session `sid`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct OutboxRecord {
    pub(crate) sid: u64,
    pub(crate) first_index: u64,
    pub(crate) count: u64,
}

impl Record for OutboxRecord {
    const VERSION: u8 = 1;
    const NAME: &'static str = "outbox record";
}

/// A message's embedding, with the fields indexes filter on so a rebuild reads only this
/// table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct VectorRecord {
    /// Key of the model in the `models` table.
    pub(crate) model: u32,
    pub(crate) role: Role,
    pub(crate) timestamp: u64,
    pub(crate) components: Vec<f32>,
}

impl Record for VectorRecord {
    const VERSION: u8 = 1;
    const NAME: &'static str = "vector record";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ModelRecord {
    pub(crate) name: String,
    pub(crate) sha256: String,
    pub(crate) dimension: u32,
}

impl Record for ModelRecord {
    const VERSION: u8 = 1;
    const NAME: &'static str = "model record";
}

/// A session's rolling summary: later context loads start after `last_index` and put the
/// summary in front.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SummaryRecord {
    pub(crate) text: String,
    pub(crate) first_index: u64,
    pub(crate) last_index: u64,
    pub(crate) created_at: u64,
}

impl Record for SummaryRecord {
    const VERSION: u8 = 1;
    const NAME: &'static str = "summary record";
}

pub(crate) fn metadata_from_text(what: &'static str, text: &str) -> Result<Metadata> {
    serde_json::from_str(text).map_err(|err| StoreError::Corrupted {
        what,
        detail: format!("metadata: {err}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_message() -> impl Strategy<Value = MessageRecord> {
        (
            prop_oneof![
                Just(Role::System),
                Just(Role::User),
                Just(Role::Assistant),
                Just(Role::Tool)
            ],
            ".*",
            any::<u64>(),
            any::<u32>(),
            ".*",
        )
            .prop_map(
                |(role, content, timestamp, token_count, metadata)| MessageRecord {
                    role,
                    content,
                    timestamp,
                    token_count,
                    metadata,
                },
            )
    }

    proptest! {
        #[test]
        fn message_records_round_trip(record in arb_message()) {
            let decoded = MessageRecord::decode(&record.encode()).unwrap();
            prop_assert_eq!(decoded, record);
        }

        #[test]
        fn outline_decodes_what_the_record_encodes(record in arb_message()) {
            let outline = MessageRecord::decode_outline(&record.encode()).unwrap();
            prop_assert_eq!(outline, (record.role, record.timestamp, record.token_count));
        }

        /// Arbitrary bytes never panic the decoder: they decode or report corruption, and the
        /// outline decoder accepts exactly what the full one accepts.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = SessionRecord::decode(&bytes);
            let full = MessageRecord::decode(&bytes);
            let outline = MessageRecord::decode_outline(&bytes);
            prop_assert_eq!(
                full.map(|r| (r.role, r.timestamp, r.token_count)).ok(),
                outline.ok()
            );
        }
    }

    #[test]
    fn version_1_session_records_upgrade() {
        let v1 = SessionRecordV1 {
            sid: 7,
            user_id: "u".into(),
            agent_id: "a".into(),
            flow_id: None,
            created_at: 1,
            updated_at: 2,
            metadata: "{}".into(),
            next_index: 3,
            next_run: 0,
            last_role: Some(Role::User),
        };
        let mut bytes = vec![1];
        bincode::serde::encode_into_std_write(&v1, &mut bytes, bincode_config()).unwrap();
        let upgraded = SessionRecord::decode(&bytes).unwrap();
        assert_eq!(
            (
                upgraded.sid,
                upgraded.next_index,
                upgraded.load_from,
                upgraded.erased
            ),
            (7, 3, 0, 0)
        );
        assert_eq!(SessionRecord::decode(&upgraded.encode()).unwrap(), upgraded);
    }

    #[test]
    fn version_2_session_records_upgrade() {
        let v2 = SessionRecordV2 {
            sid: 7,
            user_id: "u".into(),
            agent_id: "a".into(),
            flow_id: Some("f".into()),
            created_at: 1,
            updated_at: 2,
            metadata: "{}".into(),
            next_index: 9,
            next_run: 1,
            last_role: Some(Role::Assistant),
            load_from: 4,
        };
        let mut bytes = vec![2];
        bincode::serde::encode_into_std_write(&v2, &mut bytes, bincode_config()).unwrap();
        let upgraded = SessionRecord::decode(&bytes).unwrap();
        assert_eq!(
            (
                upgraded.flow_id.as_deref(),
                upgraded.next_index,
                upgraded.load_from,
                upgraded.erased
            ),
            (Some("f"), 9, 4, 0)
        );
        assert_eq!(SessionRecord::decode(&upgraded.encode()).unwrap(), upgraded);
    }

    #[test]
    fn newer_record_versions_are_refused() {
        let mut bytes = IdempotencyRecord {
            request_digest: [7; 16],
            first_index: 3,
            count: 2,
            created_session: false,
        }
        .encode();
        bytes[0] = IdempotencyRecord::VERSION + 1;
        assert!(matches!(
            IdempotencyRecord::decode(&bytes),
            Err(StoreError::NewerFormat {
                found: 2,
                supported: 1
            })
        ));
    }

    #[test]
    fn a_version_1_run_reads_as_not_redacted() {
        let v1 = RunRecordV1 {
            run_id: "r".into(),
            status: RunStatus::Failed,
            content: Some("answer".into()),
            tool_calls: "[]".into(),
            error: Some("timeout".into()),
            metadata: "{}".into(),
            created_at: 7,
        };
        let mut bytes = vec![1];
        bincode::serde::encode_into_std_write(&v1, &mut bytes, bincode_config()).unwrap();
        let run = RunRecord::decode(&bytes).unwrap();
        assert_eq!(
            (run.content.as_deref(), run.error.as_deref(), run.redacted),
            (Some("answer"), Some("timeout"), false)
        );
    }

    #[test]
    fn trailing_bytes_are_corruption() {
        let mut bytes = RunRecord {
            run_id: "r".into(),
            status: RunStatus::Completed,
            content: None,
            tool_calls: "[]".into(),
            error: None,
            metadata: "{}".into(),
            created_at: 1,
            redacted: false,
        }
        .encode();
        bytes.push(0);
        assert!(matches!(
            RunRecord::decode(&bytes),
            Err(StoreError::Corrupted { .. })
        ));
    }
}
