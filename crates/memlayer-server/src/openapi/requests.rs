//! Requests described as exactly as JSON Schema 2020-12 says them: the rules a handler checks
//! beyond a field's type (text that must not be blank, one of two forms, fields that go
//! together, enums, ranges) laid over the document utoipa derives, whose schema model has no
//! `not`, `const` or `dependentRequired`. The goal is the contract a generated client and
//! schemathesis read: every request the document allows is one the server accepts (bar
//! state: an unknown session is still `404`), and every one it rules out is refused. A field
//! the server reads `null` into as absent may be `null` in the document too, so "given"
//! below means present and not `null`. Where the server accepts a second spelling (a tool's
//! arguments as JSON text, the idempotency key as a body field), the document keeps to one.
//!
//! Patterns are written for both readers of the document: ECMA 262 (what OpenAPI names) and
//! Python's `re` (what schemathesis runs); `[^\s\x85]` is "not whitespace" to both and to
//! Rust's `char::is_whitespace` (ECMA's `\s` leaves out U+0085).

use serde_json::{Map, Value, json};

use super::ID_PATTERN;

use memlayer_memory::{MAX_LESSONS, MAX_MEMORIES, MAX_TAG_LEN, MAX_TAGS, MEMORY_TYPES};
use memlayer_store::{
    MAX_EPISODE_TEXT, MAX_ID_LEN, MAX_KEY_NAME_LEN, MAX_LESSON_TEXT, MAX_MESSAGES_PER_APPEND,
    MAX_MESSAGES_PER_SESSION, MAX_SEARCH_QUERY, MAX_SEARCH_WORDS,
};

/// Text with something other than whitespace in it, and no NUL. Whitespace is spelled out
/// as the server's `str::trim` reads it (Unicode White_Space): `\s` differs between regex
/// engines (ECMAScript's includes U+FEFF, Python's U+001C–U+001F), and a client validating
/// with either would otherwise disagree with the server about what is blank.
pub(crate) const NOT_BLANK: &str = r"^[^\x00]*[^\x00\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00]*$";

/// Text without NUL characters (the store refuses them in messages).
pub(crate) const NO_NUL: &str = r"^[^\x00]*$";

/// An RFC 3339 timestamp the server stores: from 1971 (one in 1970 with an offset may fall
/// before the epoch), days 1 to 28 of a month (every month has them), `T` and `Z` in capitals.
pub(crate) const TIMESTAMP: &str = r"^(?:197[1-9]|19[89][0-9]|[2-9][0-9]{3})-(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])$";

/// An API key's name: not blank, no control characters.
const KEY_NAME: &str = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x85\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$";

/// One tag: a word of 1 to [`MAX_TAG_LEN`] characters, whitespace around it allowed.
pub(crate) fn tag_pattern() -> String {
    format!(r"^[\s\x85]*[^\s\x85]{{1,{MAX_TAG_LEN}}}[\s\x85]*$")
}

/// A session search: 1 to [`MAX_SEARCH_WORDS`] words.
pub(crate) fn words_pattern() -> String {
    format!(
        r"^[\s\x85]*[^\s\x85]+(?:[\s\x85]+[^\s\x85]+){{0,{}}}[\s\x85]*$",
        MAX_SEARCH_WORDS - 1
    )
}

fn text(pattern: &str, max: Option<usize>) -> Value {
    let mut schema = json!({ "type": "string", "pattern": pattern });
    if let Some(max) = max {
        schema["maxLength"] = json!(max);
    }
    schema
}

fn timestamp() -> Value {
    json!({ "type": "string", "format": "date-time", "pattern": TIMESTAMP })
}

fn tags() -> Value {
    json!({ "type": "array", "maxItems": MAX_TAGS, "items": text(&tag_pattern(), None) })
}

/// Makes the request schemas of `doc` (the serialised document) exact.
pub(crate) fn make_exact(doc: &mut Value) {
    unsigned_32_bit(doc);
    let schemas = doc["components"]["schemas"]
        .as_object_mut()
        .expect("the document has component schemas");
    // The body's `idempotency_key` must equal an `Idempotency-Key` header sent with it, which
    // no schema can say: the header is the documented way (its description names the field).
    schemas
        .get_mut("AppendRequest")
        .and_then(|schema| schema["properties"].as_object_mut())
        .expect("the append request has properties")
        .remove("idempotency_key");
    let mut patch = |name: &str, fields: Value, rules: Value| {
        let schema = schemas
            .get_mut(name)
            .unwrap_or_else(|| panic!("no component schema {name}"));
        patch_schema(schema, fields, rules);
    };

    patch(
        "MessageInput",
        json!({ "content": text(NO_NUL, None), "timestamp": timestamp() }),
        json!({}),
    );
    // One message's fields or `messages`, never both; the owner's two ids together.
    patch(
        "AppendRequest",
        json!({
            "messages": { "minItems": 1, "maxItems": MAX_MESSAGES_PER_APPEND },
            "content": text(NO_NUL, None),
            "timestamp": timestamp(),
        }),
        json!({
            "oneOf": [
                { "allOf": [given("messages"), { "not": { "anyOf": [
                    given("role"), given("content"), given("token_count"),
                    given("timestamp"), given("metadata"),
                ] } }] },
                { "allOf": [given("role"), given("content"), not_given("messages")] },
            ],
            "allOf": [
                implies(given("user_id"), given("agent_id")),
                implies(given("agent_id"), given("user_id")),
                implies(given("flow_id"), given("user_id")),
                implies(given("session_metadata"), given("user_id")),
            ],
        }),
    );
    patch(
        "RecordRunRequest",
        json!({ "content": text(NO_NUL, None) }),
        json!({}),
    );
    // A user key names its user; no other key has one.
    patch(
        "CreateKeyRequest",
        json!({ "name": text(KEY_NAME, Some(MAX_KEY_NAME_LEN)) }),
        json!({
            "if": { "properties": { "role": { "const": "user" } } },
            "then": given("user_id"),
            "else": not_given("user_id"),
        }),
    );
    // Exactly one scope; excluded turns name their session.
    patch(
        "RecallRequest",
        json!({
            "query": text(NOT_BLANK, None),
            "after": { "type": "string", "format": "date-time" },
            "before": { "type": "string", "format": "date-time" },
        }),
        json!({
            "oneOf": [
                { "allOf": [
                    given("session_id"),
                    { "not": { "anyOf": [given("user_id"), given("agent_id")] } },
                ] },
                { "allOf": [given("user_id"), not_given("session_id")] },
            ],
            "anyOf": [
                { "properties": { "exclude_indices": { "maxItems": 0 } } },
                given("session_id"),
                given("exclude_session_id"),
            ],
        }),
    );
    patch(
        "RunBody",
        json!({ "message": text(NOT_BLANK, None) }),
        json!({}),
    );
    patch(
        "RecordEpisode",
        json!({
            "description": text(NOT_BLANK, Some(MAX_EPISODE_TEXT)),
            "reflection": text(NO_NUL, Some(MAX_EPISODE_TEXT)),
            "lesson": text(NOT_BLANK, Some(MAX_LESSON_TEXT)),
        }),
        json!({}),
    );
    patch(
        "RememberBody",
        json!({ "text": text(NOT_BLANK, None), "tags": tags() }),
        json!({}),
    );
    patch(
        "SearchBody",
        json!({
            "query": text(NOT_BLANK, None),
            "k": { "minimum": 1, "maximum": memlayer_agent::MAX_MEMORY_HITS },
            "tags": tags(),
        }),
        json!({}),
    );
    patch(
        "MemoryConfig",
        json!({ "types": memory_types() }),
        json!({ "additionalProperties": false }),
    );
    patch("ToolCall", json!({}), json!({ "oneOf": tool_calls() }));
    // The OpenAI-compatible endpoint: a user message to answer, every message checked
    // (`api::openai::ClientMessage::checked_text`), one answer.
    patch(
        "ChatCompletionRequest",
        json!({
            "messages": {
                "maxItems": MAX_MESSAGES_PER_APPEND,
                "contains": { "required": ["role"], "properties": { "role": { "const": "user" } } },
            },
            "n": { "minimum": 1, "maximum": 1 },
        }),
        json!({}),
    );
    patch(
        "ClientMessage",
        json!({ "tool_calls": { "items": chat_tool_call() } }),
        json!({ "allOf": [
            { "if": { "properties": { "role": { "const": "user" } } },
              "then": { "required": ["content"], "properties": { "content": user_text() } } },
            { "if": { "properties": { "role": { "const": "tool" } } },
              "then": given("tool_call_id") },
        ] }),
    );
    patch(
        "ChatContentPart",
        json!({ "type": { "const": "text" }, "text": { "type": "string" } }),
        json!({ "required": ["type", "text"] }),
    );
    // Passed to the model as it is, whatever it is.
    schemas["ChatCompletionRequest"]["properties"]["tool_choice"]
        .as_object_mut()
        .expect("tool_choice is a schema")
        .retain(|keyword, _| keyword == "description");
    // Sent back as the model wrote them, and read as text.
    without_null(&mut schemas["ClientMessage"]["properties"]["tool_calls"]);
    without_null(&mut schemas["ChatContentPart"]["properties"]["text"]);
    // The document's fields are read by hand, and `null` is not a value of either.
    for property in schemas["MemoryConfig"]["properties"]
        .as_object_mut()
        .expect("the memory configuration has properties")
        .values_mut()
    {
        without_null(property);
    }

    doc["paths"]["/v1/sessions/{session_id}/mcp"]["post"]["requestBody"]["content"]["application/json"]
        ["schema"] = mcp_message();
    doc["paths"]["/v1/agents/{agent_id}/runs"]["post"]["responses"]["200"]["content"]["text/event-stream"]
        ["schema"] = run_event();
    doc["paths"]["/v1/openai/chat/completions"]["post"]["responses"]["200"]["content"]["text/event-stream"]
        ["schema"] = chat_chunk_event();

    // The session search's words, and a message's index (a session holds at most
    // `MAX_MESSAGES_PER_SESSION` messages).
    for item in doc["paths"]
        .as_object_mut()
        .expect("the document has paths")
        .values_mut()
    {
        for parameter in item
            .as_object_mut()
            .into_iter()
            .flat_map(|operations| operations.values_mut())
            .filter_map(|operation| operation.get_mut("parameters")?.as_array_mut())
            .flatten()
        {
            match (&parameter["in"], parameter["name"].as_str()) {
                (Value::String(place), Some("q")) if place == "query" => {
                    parameter["schema"] = text(&words_pattern(), Some(MAX_SEARCH_QUERY));
                }
                (Value::String(place), Some("index")) if place == "path" => {
                    parameter["schema"]["maximum"] = json!(MAX_MESSAGES_PER_SESSION - 1);
                }
                // An optional header is absent or text, never `null`.
                (Value::String(place), _) if place == "header" => {
                    without_null(&mut parameter["schema"]);
                }
                _ => {}
            }
        }
    }
}

/// utoipa describes a `u32` as `int32` from 0 (or from the minimum a field names), which says
/// values above `i32::MAX` are refused while the server takes them: every such schema gets its
/// real range. (The API has no signed 32-bit integers.)
fn unsigned_32_bit(value: &mut Value) {
    match value {
        Value::Object(object) => {
            if object.get("format").is_some_and(|format| format == "int32")
                && object
                    .get("minimum")
                    .and_then(Value::as_i64)
                    .is_some_and(|minimum| minimum >= 0)
            {
                let maximum = object
                    .get("maximum")
                    .and_then(Value::as_u64)
                    .map_or(u64::from(u32::MAX), |max| max.min(u64::from(u32::MAX)));
                object.insert("format".into(), json!("int64"));
                object.insert("maximum".into(), json!(maximum));
            }
            object.values_mut().for_each(unsigned_32_bit);
        }
        Value::Array(items) => items.iter_mut().for_each(unsigned_32_bit),
        _ => {}
    }
}

/// Lays `fields` over the schema's properties (each must exist, and keeps its description
/// and whether it may be `null`) and adds the schema-level `rules`.
fn patch_schema(schema: &mut Value, fields: Value, rules: Value) {
    let properties = schema["properties"]
        .as_object_mut()
        .expect("a request schema has properties");
    for (name, rule) in as_object(fields) {
        let property = properties
            .get_mut(&name)
            .unwrap_or_else(|| panic!("no property {name}"));
        merge(property, rule);
    }
    for (key, rule) in as_object(rules) {
        schema[key] = rule;
    }
}

fn as_object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(object) => object,
        _ => unreachable!("rules are JSON objects"),
    }
}

/// Sets `rule`'s keys on `property`. A property that may be `null` (an `Option` the server
/// reads `null` into as absent) still may.
fn merge(property: &mut Value, rule: Value) {
    let nullable = property["type"]
        .as_array()
        .is_some_and(|kinds| kinds.contains(&json!("null")));
    for (key, value) in as_object(rule) {
        property[key] = value;
    }
    if nullable && let Some(kind) = property["type"].as_str() {
        property["type"] = json!([kind, "null"]);
    }
}

/// A tool call the model made, as a client sends it back: `arguments` may be any JSON (text,
/// as OpenAI writes it, is passed on as it is; anything else as its JSON text).
fn chat_tool_call() -> Value {
    json!({
        "type": "object",
        "required": ["function"],
        "properties": {
            "id": { "type": "string" },
            "type": { "type": "string" },
            "function": {
                "type": "object",
                "required": ["name"],
                "properties": { "name": { "type": "string" }, "arguments": {} },
            },
        },
    })
}

/// A user message's content: text, or text parts, that is not blank and holds no NUL.
fn user_text() -> Value {
    json!({ "anyOf": [
        text(NOT_BLANK, None),
        {
            "type": "array",
            "items": { "properties": { "text": text(NO_NUL, None) } },
            "contains": { "required": ["text"], "properties": { "text": text(NOT_BLANK, None) } },
        },
    ] })
}

/// `["boolean", "null"]` becomes `"boolean"`: for a field the server refuses `null` for.
fn without_null(property: &mut Value) {
    if let Some(kinds) = property["type"].as_array() {
        let kinds: Vec<Value> = kinds.iter().filter(|k| *k != "null").cloned().collect();
        property["type"] = match <[Value; 1]>::try_from(kinds) {
            Ok([one]) => one,
            Err(kinds) => Value::Array(kinds),
        };
    }
}

/// The field is there and not `null`: the server reads `null` as absent.
fn given(field: &str) -> Value {
    json!({ "required": [field], "properties": { field: { "not": { "type": "null" } } } })
}

fn not_given(field: &str) -> Value {
    json!({ "not": given(field) })
}

/// `then` must hold when `when` does.
fn implies(when: Value, then: Value) -> Value {
    json!({ "anyOf": [{ "not": when }, then] })
}

/// A memory configuration's types: each known type at most once, with exactly the keys and
/// ranges `memlayer_memory::MemoryConfig::to_overrides` accepts for it (the settings' own).
fn memory_types() -> Value {
    let count = |max: u64| json!({ "type": "integer", "minimum": 0, "maximum": max });
    let tokens = count(u64::from(u32::MAX));
    let memory_type = |id: &str, enabled: Value, config: Value| {
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["id"],
            "properties": {
                "id": { "const": id },
                "enabled": enabled,
                "config": { "type": "object", "additionalProperties": false, "properties": config },
            },
        })
    };
    let task_type = json!({
        "type": ["string", "null"],
        "minLength": 1,
        "maxLength": MAX_ID_LEN,
        "pattern": ID_PATTERN,
    });
    let types = [
        memory_type(
            "working_memory",
            json!({ "const": true }),
            json!({
                "max_tokens": { "type": "integer", "minimum": 256, "maximum": 10_000_000 },
                "compaction_strategy": { "enum": ["summarize", "drop"] },
            }),
        ),
        memory_type(
            "long_term",
            json!({ "type": "boolean" }),
            json!({ "max_memories": count(MAX_MEMORIES as u64), "max_tokens": tokens }),
        ),
        memory_type(
            "episodic",
            json!({ "type": "boolean" }),
            json!({
                "max_lessons": count(MAX_LESSONS as u64),
                "max_tokens": tokens,
                "task_type": task_type,
            }),
        ),
    ];
    let once: Vec<Value> = MEMORY_TYPES
        .iter()
        .map(|id| {
            json!({
                "contains": { "properties": { "id": { "const": id } } },
                "minContains": 0,
                "maxContains": 1,
            })
        })
        .collect();
    json!({ "type": "array", "items": { "oneOf": types }, "allOf": once })
}

/// A JSON-RPC 2.0 request or notification, as the MCP transport takes it: any method (one it
/// does not serve is answered with a JSON-RPC error, at `200`), `params` an object, an `id`
/// a string or a 64-bit integer (without one, a notification: `202`). Other shapes are `4xx`.
fn mcp_message() -> Value {
    json!({
        "description": "One JSON-RPC 2.0 message of the Model Context Protocol",
        "type": "object",
        "required": ["jsonrpc", "method"],
        "properties": {
            "jsonrpc": { "const": "2.0" },
            "id": { "oneOf": [
                { "type": "integer", "minimum": i64::MIN, "maximum": i64::MAX },
                { "type": "string" },
            ] },
            "method": { "type": "string" },
            "params": { "type": "object" },
        },
    })
}

/// One server-sent event of a streamed run, as OpenAPI 3.2 (and schemathesis) describe an
/// event stream: each event an object of its fields, `data` the event's JSON as text.
fn run_event() -> Value {
    let event = |name: &str, data: Value| {
        json!({
            "type": "object",
            "required": ["event", "data"],
            "properties": {
                "event": { "const": name },
                "data": {
                    "type": "string",
                    "contentMediaType": "application/json",
                    "contentSchema": data,
                },
            },
        })
    };
    json!({ "oneOf": [
        event("delta", json!({ "type": "object", "required": ["content"] })),
        event("tool_call", json!({ "type": "object", "required": ["name", "ok"] })),
        event("done", json!({ "$ref": "#/components/schemas/RunAnswer" })),
        event("error", json!({ "$ref": "#/components/schemas/ErrorBody" })),
    ] })
}

/// An event of a streamed chat completion: a `chat.completion.chunk`, the error that ended
/// the stream, or `[DONE]`, as OpenAI sends them (no event names).
fn chat_chunk_event() -> Value {
    let chunk = json!({
        "type": "object",
        "required": ["id", "object", "created", "model", "choices"],
        "properties": {
            "object": { "const": "chat.completion.chunk" },
            "choices": { "type": "array", "items": {
                "type": "object",
                "required": ["index", "delta", "finish_reason"],
                "properties": {
                    "index": { "type": "integer" },
                    "delta": { "type": "object" },
                    "finish_reason": { "type": ["string", "null"] },
                },
            } },
            "usage": { "$ref": "#/components/schemas/TokenUsage" },
        },
    });
    json!({
        "type": "object",
        "required": ["data"],
        "properties": { "data": {
            "type": "string",
            "if": { "const": "[DONE]" },
            "else": {
                "contentMediaType": "application/json",
                "contentSchema": { "anyOf": [chunk, { "$ref": "#/components/schemas/ErrorBody" }] },
            },
        } },
    })
}

/// One alternative per agent tool: its name and its arguments as an object, with the rules
/// the tool checks beyond the definition a model is given.
fn tool_calls() -> Value {
    let Value::Array(definitions) = memlayer_agent::definitions() else {
        unreachable!("the tool definitions are an array")
    };
    let calls = definitions
        .into_iter()
        .map(|definition| {
            let function = &definition["function"];
            let name = function["name"].clone();
            let mut arguments = function["parameters"].clone();
            if let Some(properties) = arguments["properties"].as_object_mut() {
                for (field, property) in properties.iter_mut() {
                    match field.as_str() {
                        "text" => merge(property, text(NOT_BLANK, None)),
                        "query" if name == "session_search" => {
                            merge(property, text(&words_pattern(), Some(MAX_SEARCH_QUERY)));
                        }
                        "query" => merge(property, text(NOT_BLANK, None)),
                        "tags" => merge(property, tags()),
                        // The server reads a memory id as a `u64`.
                        "memory_id" => merge(property, json!({ "maximum": u64::MAX })),
                        _ => {}
                    }
                    // memory_recall reads these as options: `null` is leaving them out.
                    if name == "memory_recall" && matches!(field.as_str(), "k" | "types" | "tags") {
                        let kind = property["type"].clone();
                        property["type"] = json!([kind, "null"]);
                    }
                }
            }
            json!({
                "type": "object",
                "required": ["name", "arguments"],
                "properties": { "name": { "const": name }, "arguments": arguments },
            })
        })
        .collect();
    Value::Array(calls)
}
