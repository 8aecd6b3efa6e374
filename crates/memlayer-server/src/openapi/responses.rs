//! The answers an operation can give whatever it does, each under its own status with its
//! error `code`s (`ApiError::status_and_code` is where they come from), so a generated client
//! can match them and schemathesis checks each such answer's code and headers. The `4XX` and
//! `5XX` ranges describe the rest. An answer an operation documents itself (a run's `503`
//! with `model_not_configured`) stays as it is.

use serde_json::{Value, json};

/// One answer: status, description, the codes its body may carry, and a header it always
/// has.
struct Answer {
    status: &'static str,
    description: &'static str,
    codes: &'static [&'static str],
    header: Option<(&'static str, &'static str)>,
}

/// What every `/v1` operation may answer: it needs a key, is rate limited per key, and runs
/// under the in-flight limit and the request timeout.
const EVERY_KEYED: [Answer; 3] = [
    Answer {
        status: "401",
        description: "No valid API key: missing, malformed, unknown, revoked or expired",
        codes: &["unauthorized"],
        header: Some(("WWW-Authenticate", "`Bearer realm=\"memlayer\"`, RFC 6750")),
    },
    Answer {
        status: "429",
        description: "The key's rate limit is used up",
        codes: &["rate_limited"],
        header: Some(("Retry-After", "Seconds to wait before trying again")),
    },
    Answer {
        status: "503",
        description: "Too many requests in flight (`overloaded`, with `Retry-After`), the \
            request outlasted the server's limit (`timeout`), the server is shutting down \
            (`unavailable`), or the disk failed (`storage_unavailable`, with `Retry-After`)",
        codes: &[
            "overloaded",
            "timeout",
            "unavailable",
            "storage_unavailable",
        ],
        header: None,
    },
];

/// What every operation with a JSON body may answer about the body itself.
const EVERY_BODY: [Answer; 2] = [
    Answer {
        status: "413",
        description: "The body is larger than the server takes (`max_body_bytes`)",
        codes: &["payload_too_large"],
        header: None,
    },
    Answer {
        status: "415",
        description: "The body is not sent as `application/json`",
        codes: &["unsupported_media_type"],
        header: None,
    },
];

/// Adds the answers above to the operations of `doc` (the serialised document).
pub(crate) fn add(doc: &mut Value) {
    for (path, item) in doc["paths"]
        .as_object_mut()
        .expect("the document has paths")
    {
        let keyed = path.starts_with("/v1/");
        for operation in item.as_object_mut().expect("a path item").values_mut() {
            let body = operation.get("requestBody").is_some();
            let answers = keyed
                .then_some(&EVERY_KEYED[..])
                .into_iter()
                .chain(body.then_some(&EVERY_BODY[..]))
                .flatten();
            let responses = operation["responses"]
                .as_object_mut()
                .expect("an operation has responses");
            for answer in answers {
                responses
                    .entry(answer.status)
                    .or_insert_with(|| response(answer));
            }
        }
    }
}

fn response(answer: &Answer) -> Value {
    let schema = json!({ "allOf": [
        { "$ref": "#/components/schemas/ErrorBody" },
        { "properties": { "error": { "properties": { "code": { "enum": answer.codes } } } } },
    ] });
    let mut response = json!({
        "description": answer.description,
        "content": { "application/json": { "schema": schema } },
    });
    if let Some((name, description)) = answer.header {
        response["headers"][name] = json!({
            "description": description,
            "required": true,
            "schema": { "type": "string" },
        });
    }
    response
}
