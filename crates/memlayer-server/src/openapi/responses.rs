//! The error answers of each operation, each under its own status with the exact error
//! `code`s it can carry, so a generated client can match them and schemathesis (which
//! checks every answer's status and body against the document) fails on any other.
//!
//! Each handler declares its errors beside itself, with [`errors!`], as a list of the named
//! building blocks below: what every `/v1` route can answer ([`KEYED`]), what its path, query
//! or JSON body can make it answer ([`PATH`], [`QUERY`], [`JSON_BODY`]), what the state it
//! touches can ([`SESSION`], [`WRITES`], …), and answers of its own (a block two handlers
//! share lives beside the one that owns it, as `api::context::CHANGING_SESSION`). Each is
//! read off the handler and the library errors it maps (`error.rs`). Blocks may overlap: the
//! answers are merged by status and code.
//!
//! The macro makes a type that implements `utoipa::IntoResponses`, named in the handler's
//! `#[utoipa::path]` `responses(...)`, so the declaration travels with the annotation the
//! route table collects: a reviewer changing a handler sees its errors in the same place,
//! which a table keyed by operation id here would not give. What the declarations claim is
//! checked twice: by `tests::every_error_answer_is_exact` (every code one the server
//! defines, and every one of them some operation's; every `/v1` operation with the keyed
//! answers, every parameter and body with theirs), and by the end-to-end tests, which check
//! every error answer they get against the served document.
//!
//! A `500` is not listed: the `5XX` range (see `openapi::Common`) describes it. Neither is
//! `405`, the answer for a method a path does not serve, which is no operation's.

use std::collections::BTreeMap;

use serde_json::Value;

use utoipa::openapi::schema::{AllOfBuilder, ObjectBuilder, Type};
use utoipa::openapi::{ContentBuilder, HeaderBuilder, Ref, RefOr, Response, ResponseBuilder};

/// One error answer an operation can give: its status, its `code` and when it is given.
pub(crate) struct Failure {
    status: u16,
    code: &'static str,
    when: &'static str,
}

/// A building block: the answers a handler gives for one reason.
pub(crate) type Failures = &'static [Failure];

/// One answer of an operation of its own.
pub(crate) const fn fails(status: u16, code: &'static str, when: &'static str) -> Failure {
    Failure { status, code, when }
}

/// What every `/v1` operation can answer, whatever its role: it needs a key (`401`), whose
/// role it checks (`403`: an operator key may use no tenant's route, and a tenant's key not
/// the backup), and whose tenant the `x-memlayer-tenant` header may repeat; it is rate
/// limited per key, and runs under the in-flight limit and the request timeout; the store
/// may be shutting down, or its disk fail, under any of them (the key is read from it).
pub(crate) const KEYED: Failures = &[
    fails(400, "invalid_header", "A header is not visible ASCII"),
    fails(
        401,
        "unauthorized",
        "No valid API key: missing, malformed, unknown, revoked or expired",
    ),
    fails(
        403,
        "forbidden",
        "The key's role may not do this (the operation's security lists the roles that may)",
    ),
    fails(
        404,
        "tenant_not_found",
        "The `x-memlayer-tenant` header (or `project_id`) names another tenant than the key's",
    ),
    fails(
        422,
        "invalid_id",
        "An identifier (in the path, the query, a header or the body) is not one the server \
         takes",
    ),
    fails(429, "rate_limited", "The key's rate limit is used up"),
    fails(
        503,
        "overloaded",
        "Too many requests in flight (see `Retry-After`)",
    ),
    fails(503, "timeout", "The request outlasted the server's limit"),
    fails(503, "unavailable", "The server is shutting down"),
    fails(
        503,
        "storage_unavailable",
        "The disk or the database failed, or other nodes sharing the database have not \
         applied an erasure yet (see `Retry-After`); an erasure it stopped carries its \
         `erasure_id` and finishes by itself",
    ),
];

/// What an operation with path parameters can answer about them.
pub(crate) const PATH: Failures = &[fails(
    400,
    "invalid_path",
    "A path parameter does not decode (not UTF-8, or not a number where one is expected)",
)];

/// What an operation with query parameters can answer about them.
pub(crate) const QUERY: Failures = &[fails(
    400,
    "invalid_query",
    "The query string does not parse: an unknown parameter or a value of the wrong type",
)];

/// What an operation with a JSON body can answer about the body itself.
pub(crate) const JSON_BODY: Failures = &[
    fails(400, "malformed_json", "The body is not JSON"),
    fails(
        400,
        "invalid_body",
        "The body is not a JSON object of the request's shape (a missing or unknown field, \
         a value of the wrong type)",
    ),
    fails(
        413,
        "payload_too_large",
        "The body is larger than the server takes (`max_body_bytes`)",
    ),
    fails(
        415,
        "unsupported_media_type",
        "The body is not sent as `application/json`",
    ),
];

/// A value the handler checks beyond its type.
pub(crate) const VALUE: Failures = &[fails(
    422,
    "invalid_value",
    "A value is out of range, or contradicts another (the message names it)",
)];

/// A settings document the handler checks.
pub(crate) const SETTING: Failures = &[fails(
    422,
    "invalid_setting",
    "A setting is invalid (the message names it)",
)];

/// What an operation that writes can answer about the disk.
pub(crate) const WRITES: Failures = &[fails(
    507,
    "storage_full",
    "The disk is full: writes are refused until space is freed, reads go on (see \
     `Retry-After`); an erasure it stopped carries its `erasure_id` and finishes by itself",
)];

/// An operation on a session the caller must reach (for a user-scoped key, one of its
/// user's).
pub(crate) const SESSION: Failures = &[fails(
    404,
    "session_not_found",
    "No such session (or another user's)",
)];

/// An operation on a user named in the path.
pub(crate) const USER: Failures = &[fails(
    404,
    "user_not_found",
    "A user-scoped key names another user",
)];

/// An agent run: the model's answers, and the limit on runs.
pub(crate) const RUN: Failures = &[
    fails(
        502,
        "upstream_failed",
        "The model failed; the failed run is named (`run_id`, `session_id`), the user's \
         message stored",
    ),
    fails(
        503,
        "model_not_configured",
        "No chat model is configured; nothing stored",
    ),
    fails(
        503,
        "overloaded",
        "As many runs as the server admits are going on (see `Retry-After`); nothing stored",
    ),
    fails(
        504,
        "upstream_timeout",
        "The model did not answer in time; the failed run is named",
    ),
];

/// What every route answers when it outlasts the server's limit, keyed or not.
pub(crate) const TIMED: Failures = &[fails(
    503,
    "timeout",
    "The request outlasted the server's limit",
)];

/// The headers an answer of a status always carries (`ApiError::into_response`).
fn header(status: u16) -> Option<(&'static str, &'static str)> {
    match status {
        401 => Some(("WWW-Authenticate", "`Bearer realm=\"memlayer\"`, RFC 6750")),
        429 | 507 => Some(("Retry-After", "Seconds to wait before trying again")),
        _ => None,
    }
}

/// The document's error answers of an operation made of `blocks`: one per status, its
/// description listing each code and when it is given, its body an `ErrorBody` whose `code`
/// is one of those.
pub(crate) fn responses(blocks: &[Failures]) -> BTreeMap<String, RefOr<Response>> {
    // Status -> code -> the reasons it is given, in the order the blocks list them.
    let mut statuses: BTreeMap<u16, Vec<(&str, Vec<&str>)>> = BTreeMap::new();
    for failure in blocks.iter().copied().flatten() {
        // Built once, when the document is: a typo fails every test that reads it.
        assert!(
            crate::error::CODES.contains(&failure.code),
            "`{}` is no code the server answers with (`error::CODES`)",
            failure.code
        );
        let codes = statuses.entry(failure.status).or_default();
        match codes.iter_mut().find(|(code, _)| *code == failure.code) {
            Some((_, whens)) if whens.contains(&failure.when) => {}
            Some((_, whens)) => whens.push(failure.when),
            None => codes.push((failure.code, vec![failure.when])),
        }
    }
    statuses
        .into_iter()
        .map(|(status, codes)| (status.to_string(), response(status, &codes).into()))
        .collect()
}

fn response(status: u16, codes: &[(&str, Vec<&str>)]) -> Response {
    let description = codes
        .iter()
        .map(|(code, whens)| format!("`{code}`: {}", whens.join("; ")))
        .collect::<Vec<_>>()
        .join(". ");
    let code = ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(codes.iter().map(|(code, _)| *code)));
    let schema = AllOfBuilder::new()
        .item(Ref::from_schema_name("ErrorBody"))
        .item(ObjectBuilder::new().property("error", ObjectBuilder::new().property("code", code)));
    let mut response = ResponseBuilder::new().description(description).content(
        "application/json",
        ContentBuilder::new().schema(Some(schema)).build(),
    );
    if let Some((name, description)) = header(status) {
        response = response.header(
            name,
            HeaderBuilder::new()
                .schema(ObjectBuilder::new().schema_type(Type::String))
                .description(Some(description))
                .build(),
        );
    }
    response.build()
}

/// Marks the headers of [`header`] required in `doc` (the serialised document): they always
/// come with their answer, and utoipa's `Header` cannot say so.
pub(crate) fn require_headers(doc: &mut Value) {
    for item in doc["paths"]
        .as_object_mut()
        .expect("the document has paths")
        .values_mut()
    {
        for operation in item.as_object_mut().expect("a path item").values_mut() {
            let responses = operation["responses"]
                .as_object_mut()
                .expect("an operation has responses");
            for (status, response) in responses {
                let name = status.parse().ok().and_then(header).map(|(name, _)| name);
                if let Some(header) = name.and_then(|name| response["headers"].get_mut(name)) {
                    header["required"] = Value::Bool(true);
                }
            }
        }
    }
}

/// Declares a handler's error answers: `errors!(Name = [BLOCK, …, &[fails(…), …]]);` makes
/// the type `Name` to list in its `#[utoipa::path]` `responses(...)`.
macro_rules! errors {
    ($name:ident = [$($block:expr),* $(,)?]) => {
        // Named in the handler's `#[utoipa::path]`; never built.
        pub(crate) struct $name;

        impl utoipa::IntoResponses for $name {
            fn responses() -> std::collections::BTreeMap<
                String,
                utoipa::openapi::RefOr<utoipa::openapi::Response>,
            > {
                #[allow(unused_imports)]
                use $crate::openapi::responses::*;
                const BLOCKS: &[$crate::openapi::responses::Failures] = &[$($block),*];
                $crate::openapi::responses::responses(BLOCKS)
            }
        }
    };
}
pub(crate) use errors;
