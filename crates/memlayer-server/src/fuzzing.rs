//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`; no memlayer binary enables
//! it): every request body the server deserialises, parsed exactly as its handler's extractor
//! parses it (`extract::parse_body`, what `ApiJson` runs) and then checked by the same validation the
//! handler runs before it touches any state. Validation that needs the store (an unknown
//! session, a conflict) is out of reach here; the end-to-end tests cover it.

use memlayer_memory::{ContextSettings, SettingsOverrides, TokenEncoding};
use memlayer_store::{Append, Timestamp, validate_id};
use serde::de::DeserializeOwned;

use crate::ApiError;
use crate::api::context::ContextRequest;
use crate::api::erasure::Retention;
use crate::api::keys::CreateKeyRequest;
use crate::api::memories::{RememberBody, SearchBody};
use crate::api::recall::RecallRequest;
use crate::api::runs::RunBody;
use crate::api::sessions::{AppendRequest, CreateSessionRequest, RecordRunRequest, new_messages};
use crate::api::tools::ToolCall;

/// The request bodies [`request_body`] picks from, in the order of its `kind`.
pub const BODIES: [&str; 12] = [
    "append",
    "create_session",
    "record_run",
    "recall",
    "context",
    "settings",
    "create_key",
    "retention",
    "remember",
    "memory_search",
    "tool_call",
    "agent_run",
];

/// Parses and validates `bytes` as the body `BODIES[kind % BODIES.len()]`. Whatever the
/// bytes, the answer must be `Ok` or a client error (4xx): a 5xx here would be a server bug
/// triggered by a request body.
pub fn request_body(kind: u8, bytes: &[u8]) -> Result<(), ApiError> {
    let checked = check(usize::from(kind) % BODIES.len(), bytes);
    if let Err(err) = &checked {
        let (status, _) = err.status_and_code();
        assert!(
            status.is_client_error(),
            "{status} for a request body: {err}"
        );
    }
    checked
}

fn check(kind: usize, bytes: &[u8]) -> Result<(), ApiError> {
    match kind {
        0 => {
            let parts = parse::<AppendRequest>(bytes)?.into_parts()?;
            let append = Append {
                messages: new_messages(parts.messages, TokenEncoding::default())?,
                create: parts.create,
                idempotency_key: parts.idempotency_key,
            };
            append.validate()?;
        }
        1 => {
            let (session_id, owner) = parse::<CreateSessionRequest>(bytes)?.into_parts();
            if let Some(id) = session_id {
                validate_id("session_id", &id)?;
            }
            owner.validate()?;
        }
        2 => memlayer_store::NewRun::from(parse::<RecordRunRequest>(bytes)?).validate()?,
        3 => {
            parse::<RecallRequest>(bytes)?
                .into_query(memlayer_store::Access::tenant_wide("fuzz"))?;
        }
        4 => {
            let request = parse::<ContextRequest>(bytes)?;
            ContextSettings::layered([&request.settings])?;
        }
        5 => {
            ContextSettings::layered([&parse::<SettingsOverrides>(bytes)?])?;
        }
        6 => {
            parse::<CreateKeyRequest>(bytes)?.expires_at(Timestamp::now())?;
        }
        7 => parse::<Retention>(bytes)?.validate()?,
        8 => {
            parse::<RememberBody>(bytes)?;
        }
        9 => {
            parse::<SearchBody>(bytes)?;
        }
        10 => {
            let call = parse::<ToolCall>(bytes)?;
            memlayer_agent::parse_call(&call.name, call.arguments)?;
        }
        _ => {
            let (request, _) = parse::<RunBody>(bytes)?.into_request("fuzz".into(), "agent".into());
            request.validate()?;
        }
    }
    Ok(())
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    crate::extract::parse_body(bytes)
}
