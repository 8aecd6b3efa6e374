//! JSON shapes of the API (field names in snake_case) and their conversion from the store's
//! domain types. Timestamps travel as RFC 3339 strings in UTC with microseconds.

use memlayer_store::{Message, Metadata, Role, Run, RunStatus, Session, SessionState, Timestamp};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339 as Rfc3339Format;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type};
use utoipa::{PartialSchema, ToSchema};

use crate::ApiError;

/// A timestamp that serialises as RFC 3339.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rfc3339(pub(crate) Timestamp);

impl Serialize for Rfc3339 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let nanos = i128::from(self.0.as_micros()) * 1_000;
        let formatted = OffsetDateTime::from_unix_timestamp_nanos(nanos)
            .ok()
            .and_then(|time| time.format(&Rfc3339Format).ok())
            .ok_or_else(|| serde::ser::Error::custom("timestamp out of range"))?;
        serializer.serialize_str(&formatted)
    }
}

impl PartialSchema for Rfc3339 {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
            .description(Some("RFC 3339 in UTC with microseconds"))
            .examples(["2026-05-06T10:00:00.123456Z"])
            .into()
    }
}

impl ToSchema for Rfc3339 {
    fn name() -> std::borrow::Cow<'static, str> {
        "Timestamp".into()
    }
}

/// Reads a non-negative integer, which the document describes as `int64` (utoipa's `u64`):
/// one past `i64::MAX` is refused as malformed, as the document says, rather than taken.
pub(crate) fn int64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    within_int64(u64::deserialize(deserializer)?)
}

/// [`int64`] for each integer of a list.
pub(crate) fn int64s<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u64>, D::Error> {
    Vec::<u64>::deserialize(deserializer)?
        .into_iter()
        .map(within_int64)
        .collect()
}

fn within_int64<E: serde::de::Error>(value: u64) -> Result<u64, E> {
    if i64::try_from(value).is_ok() {
        Ok(value)
    } else {
        Err(E::custom(format_args!("{value} is beyond the int64 range")))
    }
}

/// Parses a client-supplied RFC 3339 timestamp; times before 1970 are rejected.
pub(crate) fn parse_timestamp(field: &str, text: &str) -> Result<Timestamp, ApiError> {
    let micros = parse_micros(field, text)?;
    u64::try_from(micros)
        .map(Timestamp::from_micros)
        .map_err(|_| {
            ApiError::invalid(
                "invalid_value",
                format!("invalid {field}: must not be before 1970-01-01"),
            )
        })
}

/// Parses the RFC 3339 bound of a time filter. A bound before 1970 is 1970: nothing stored
/// is older, so the filter means the same, and any date a client may write is a bound.
pub(crate) fn parse_bound(field: &str, text: &str) -> Result<Timestamp, ApiError> {
    let micros = parse_micros(field, text)?;
    Ok(Timestamp::from_micros(u64::try_from(micros).unwrap_or(0)))
}

/// Microseconds since 1970 of an RFC 3339 timestamp, negative before.
fn parse_micros(field: &str, text: &str) -> Result<i128, ApiError> {
    let time = OffsetDateTime::parse(text, &Rfc3339Format).map_err(|_| {
        ApiError::invalid(
            "invalid_value",
            format!("invalid {field}: expected an RFC 3339 timestamp such as 2026-05-06T10:00:00Z"),
        )
    })?;
    Ok(time.unix_timestamp_nanos() / 1_000)
}

/// A session: who it belongs to, its counts and turn state.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Session)]
pub(crate) struct SessionBody {
    pub(crate) session_id: String,
    pub(crate) user_id: String,
    pub(crate) agent_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) flow_id: Option<String>,
    #[schema(value_type = crate::openapi::foreign::SessionState)]
    pub(crate) state: SessionState,
    pub(crate) message_count: u64,
    pub(crate) run_count: u64,
    /// Context loads start at this index; earlier messages were cleared (still stored).
    pub(crate) load_from: u64,
    #[schema(value_type = crate::openapi::foreign::Metadata)]
    pub(crate) metadata: Metadata,
    pub(crate) created_at: Rfc3339,
    pub(crate) updated_at: Rfc3339,
}

impl From<Session> for SessionBody {
    fn from(session: Session) -> Self {
        Self {
            session_id: session.id,
            user_id: session.user_id,
            agent_id: session.agent_id,
            flow_id: session.flow_id,
            state: session.state,
            message_count: session.message_count,
            run_count: session.run_count,
            load_from: session.load_from,
            metadata: session.metadata,
            created_at: Rfc3339(session.created_at),
            updated_at: Rfc3339(session.updated_at),
        }
    }
}

/// A stored message.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Message)]
pub(crate) struct MessageBody {
    /// Its position in the session, from 0, gapless.
    pub(crate) index: u64,
    #[schema(value_type = crate::openapi::foreign::Role)]
    pub(crate) role: Role,
    pub(crate) content: String,
    pub(crate) token_count: u32,
    pub(crate) timestamp: Rfc3339,
    #[schema(value_type = crate::openapi::foreign::Metadata)]
    pub(crate) metadata: Metadata,
}

impl From<Message> for MessageBody {
    fn from(message: Message) -> Self {
        Self {
            index: message.index,
            role: message.role,
            content: message.content,
            token_count: message.token_count,
            timestamp: Rfc3339(message.timestamp),
            metadata: message.metadata,
        }
    }
}

/// A recorded agent run.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Run)]
pub(crate) struct RunBody {
    pub(crate) run_id: String,
    pub(crate) session_id: String,
    #[schema(value_type = crate::openapi::foreign::RunStatus)]
    pub(crate) status: RunStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) content: Option<String>,
    pub(crate) tool_calls: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    #[schema(value_type = crate::openapi::foreign::Metadata)]
    pub(crate) metadata: Metadata,
    pub(crate) created_at: Rfc3339,
    /// A message of the session was erased after the run was recorded: its content, error,
    /// tool calls and metadata were dropped with it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) redacted: bool,
}

impl RunBody {
    pub(crate) fn new(session_id: String, run: Run) -> Self {
        Self {
            run_id: run.run_id,
            session_id,
            status: run.status,
            content: run.content,
            tool_calls: run.tool_calls,
            error: run.error,
            metadata: run.metadata,
            created_at: Rfc3339(run.created_at),
            redacted: run.redacted,
        }
    }
}

/// One message in an append request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MessageInput {
    #[schema(value_type = crate::openapi::foreign::Role)]
    pub(crate) role: Role,
    pub(crate) content: String,
    /// The server counts every message's tokens with its encoding; a count sent here is kept
    /// only when it is larger (the client's model may count more), never when it is smaller,
    /// so no message can shrink its own share of a context's budget.
    pub(crate) token_count: Option<u32>,
    /// RFC 3339; the append time when absent.
    pub(crate) timestamp: Option<String>,
    #[serde(default)]
    #[schema(value_type = crate::openapi::foreign::Metadata)]
    pub(crate) metadata: Metadata,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip_through_rfc3339() {
        let ts = parse_timestamp("t", "2026-05-06T10:00:00.123456Z").unwrap();
        assert_eq!(ts.as_micros(), 1_778_061_600_123_456);
        let json = serde_json::to_string(&Rfc3339(ts)).unwrap();
        assert_eq!(json, "\"2026-05-06T10:00:00.123456Z\"");
    }

    #[test]
    fn a_bound_before_1970_is_1970() {
        for early in ["1969-12-31T23:59:59Z", "0001-01-01T00:00:00+05:00"] {
            assert_eq!(parse_bound("t", early).unwrap(), Timestamp::from_micros(0));
        }
        let ts = parse_bound("t", "2026-05-06T10:00:00.123456Z").unwrap();
        assert_eq!(ts.as_micros(), 1_778_061_600_123_456);
        assert!(parse_bound("t", "yesterday").is_err());
    }

    /// The timestamps the document's pattern admits (`requests::TIMESTAMP`) all parse.
    #[test]
    fn the_documented_timestamp_forms_parse() {
        for text in [
            "1971-01-01T00:00:00Z",
            "2026-02-28T23:59:59.123456789+14:00",
            "9999-12-28T00:00:00-23:59",
            "2000-10-10T10:10:10.1Z",
        ] {
            parse_timestamp("t", text).unwrap();
        }
    }

    #[test]
    fn bad_timestamps_are_invalid_values() {
        for bad in ["yesterday", "1969-12-31T23:59:59Z", ""] {
            assert!(matches!(
                parse_timestamp("t", bad),
                Err(ApiError::Invalid {
                    code: "invalid_value",
                    ..
                })
            ));
        }
    }
}
