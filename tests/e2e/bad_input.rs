//! Bad requests: every malformed, mistyped, oversized or invalid request answers a clear 4xx
//! in the API's error shape `{"error": {"code", "message"}}`, and leaves the store exactly as
//! it was (compared through the API before and after each request, and, for one request of
//! every kind, through the store file itself after the server stopped).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use memlayer_server::ServerConfig;
use memlayer_store::{Access, MAX_PAGE_SIZE, SessionFilter, Store};
use memlayer_tests::{ADMIN_KEY, TestServer, assert_error, bearer, json, send};
use reqwest::Method;
use reqwest::blocking::RequestBuilder;
use serde_json::Value;

const SESSION: &str = "/v1/sessions/chat-1";
const MESSAGES: &str = "/v1/sessions/chat-1/messages";
const RUNS: &str = "/v1/sessions/chat-1/runs";

/// A server with one session (two messages, one run) and what the API shows of it.
struct Fixture {
    server: TestServer,
    before: Value,
}

impl Fixture {
    fn new() -> Self {
        Self::with_config(memlayer_tests::config())
    }

    fn with_config(config: ServerConfig) -> Self {
        let server = TestServer::with_config(config);
        let (status, _) = server.post(
            MESSAGES,
            &json!({
                "messages": [
                    { "role": "user", "content": "hello" },
                    { "role": "assistant", "content": "hi", "metadata": { "k": "v" } },
                ],
                "user_id": "alice",
                "agent_id": "helper",
            }),
        );
        assert_eq!(status, 201);
        let (status, _) = server.post(RUNS, &json!({ "run_id": "r1", "status": "COMPLETED" }));
        assert_eq!(status, 201);
        let mut fixture = Self {
            server,
            before: Value::Null,
        };
        fixture.before = fixture.snapshot();
        fixture
    }

    /// Everything the API shows: the session with its messages, its runs, and the listings
    /// of the default tenant and of another one.
    fn snapshot(&self) -> Value {
        let tenant_listing = send(self.server.request_as("acme", Method::GET, "/v1/sessions"));
        json!({
            "session": self.server.get(SESSION),
            "runs": self.server.get(RUNS),
            "listing": self.server.get("/v1/sessions"),
            "other_tenant": tenant_listing,
        })
    }

    /// Asserts that `answer` is the error `status`/`code` and that the store is unchanged.
    #[track_caller]
    fn rejects(&self, what: &str, answer: (u16, Value), status: u16, code: &str) {
        assert_eq!(
            (answer.0, answer.1["error"]["code"].as_str()),
            (status, Some(code)),
            "{what}: {}",
            answer.1
        );
        assert_error(&answer, status, code);
        assert_eq!(self.snapshot(), self.before, "{what} changed the store");
    }

    fn post_bytes(&self, path: &str, body: impl Into<Vec<u8>>) -> (u16, Value) {
        send(self.json_request(Method::POST, path, body))
    }

    fn json_request(&self, method: Method, path: &str, body: impl Into<Vec<u8>>) -> RequestBuilder {
        self.server
            .request(method, path)
            .header("content-type", "application/json")
            .body(body.into())
    }

    /// Sends a request line as is (no normalisation of `..` or percent escapes).
    fn raw(&self, method: &str, target: &str, body: &str) -> (u16, Value) {
        let request = format!(
            "{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Authorization: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            bearer(ADMIN_KEY),
            body.len()
        );
        self.server.raw(request.as_bytes())
    }
}

#[test]
fn malformed_json_is_400_malformed_json() {
    let fixture = Fixture::new();
    for body in [
        r#"{"role": "user","#,
        r#"{"role": "user" "content": "x"}"#,
        r#"{"role": 'user', "content": "x"}"#,
        r#"{"role": "user", "content": "x"} trailing"#,
        "",
        "nul",
    ] {
        fixture.rejects(
            &format!("append {body:?}"),
            fixture.post_bytes(MESSAGES, body),
            400,
            "malformed_json",
        );
    }
    fixture.rejects(
        "create with a truncated body",
        fixture.post_bytes("/v1/sessions", r#"{"user_id": "bob", "agent_id": "#),
        400,
        "malformed_json",
    );
    fixture.rejects(
        "run with a truncated body",
        fixture.post_bytes(RUNS, r#"{"status": "#),
        400,
        "malformed_json",
    );
}

#[test]
fn wrong_types_and_unknown_fields_are_400_invalid_body() {
    let fixture = Fixture::new();
    for body in [
        json!({ "role": "user", "content": 42 }),
        json!({ "role": "robot", "content": "x" }),
        json!({ "role": "user", "content": "x", "token_count": -1 }),
        json!({ "role": "user", "content": "x", "token_count": 4_294_967_296_u64 }),
        json!({ "role": "user", "content": "x", "metadata": ["not", "an", "object"] }),
        json!({ "role": "user", "content": "x", "colour": "red" }),
        json!({ "messages": { "role": "user", "content": "x" } }),
        json!({ "messages": [{ "role": "user", "content": "x", "extra": true }] }),
        json!({ "messages": [{ "role": "user" }] }),
        json!("a string"),
        json!(null),
    ] {
        fixture.rejects(
            &format!("append {body}"),
            fixture.server.post(MESSAGES, &body),
            400,
            "invalid_body",
        );
    }
    for body in [
        json!({ "user_id": "bob" }),
        json!({ "user_id": 7, "agent_id": "helper" }),
        json!({ "user_id": "bob", "agent_id": "helper", "owner": "me" }),
    ] {
        fixture.rejects(
            &format!("create {body}"),
            fixture.server.post("/v1/sessions", &body),
            400,
            "invalid_body",
        );
    }
    for body in [
        json!({ "status": "DONE" }),
        json!({ "status": "completed" }),
        json!({ "run_id": "r2" }),
        json!({ "status": "RUNNING", "tool_calls": "search" }),
        json!({ "status": "RUNNING", "duration": 3 }),
    ] {
        fixture.rejects(
            &format!("run {body}"),
            fixture.server.post(RUNS, &body),
            400,
            "invalid_body",
        );
    }
}

#[test]
fn bodies_that_are_not_declared_json_are_415() {
    let fixture = Fixture::new();
    let body = r#"{"role": "user", "content": "x"}"#;
    fixture.rejects(
        "no content type",
        send(fixture.server.request(Method::POST, MESSAGES).body(body)),
        415,
        "unsupported_media_type",
    );
    for content_type in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/jsonx",
    ] {
        fixture.rejects(
            content_type,
            send(
                fixture
                    .server
                    .request(Method::POST, MESSAGES)
                    .header("content-type", content_type)
                    .body(body),
            ),
            415,
            "unsupported_media_type",
        );
    }
    fixture.rejects(
        "create without content type",
        send(
            fixture
                .server
                .request(Method::POST, "/v1/sessions")
                .body(r#"{"user_id": "bob", "agent_id": "helper"}"#),
        ),
        415,
        "unsupported_media_type",
    );
}

/// The body-limit fixture: 1 KiB, and a JSON body of exactly `len` bytes.
const SMALL_LIMIT: usize = 1024;

fn body_of_len(len: usize) -> String {
    let empty = r#"{"role": "user", "content": ""}"#;
    let content = "x".repeat(len - empty.len());
    let body = format!(r#"{{"role": "user", "content": "{content}"}}"#);
    assert_eq!(body.len(), len);
    body
}

#[test]
fn bodies_over_the_limit_are_413() {
    let fixture = Fixture::with_config(ServerConfig {
        max_body_bytes: SMALL_LIMIT,
        ..memlayer_tests::config()
    });
    // Each oversized request goes over a connection of its own: see
    // `a_413_does_not_break_the_next_request_on_the_connection` for why.
    let alone = reqwest::blocking::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let url = format!("{}{MESSAGES}", fixture.server.base_url());
    let oversized = |body: reqwest::blocking::Body| {
        send(
            alone
                .post(&url)
                .header("content-type", "application/json")
                .header("authorization", bearer(ADMIN_KEY))
                .body(body),
        )
    };
    fixture.rejects(
        "a body one byte over the limit",
        oversized(body_of_len(SMALL_LIMIT + 1).into()),
        413,
        "payload_too_large",
    );
    fixture.rejects(
        "a body far over the limit",
        oversized(body_of_len(64 * SMALL_LIMIT).into()),
        413,
        "payload_too_large",
    );
    // Without a Content-Length the limit applies while reading.
    let streamed = std::io::Cursor::new(body_of_len(4 * SMALL_LIMIT));
    fixture.rejects(
        "a chunked body over the limit",
        oversized(reqwest::blocking::Body::new(streamed)),
        413,
        "payload_too_large",
    );

    // A body of exactly the limit is accepted.
    let (status, answer) = fixture.post_bytes(MESSAGES, body_of_len(SMALL_LIMIT));
    assert_eq!((status, &answer["indices"]), (201, &json!([2])));
}

/// HTTP/1.1 (RFC 9112, section 9.6): a server that closes the connection after a response
/// must say so with `Connection: close`; otherwise a keep-alive client sends its next request
/// down a dead connection. After refusing a large body unread, the server must either announce
/// the close or keep answering on the connection.
#[test]
fn a_413_does_not_break_the_next_request_on_the_connection() {
    let server = TestServer::with_config(ServerConfig {
        max_body_bytes: SMALL_LIMIT,
        ..memlayer_tests::config()
    });
    let body = body_of_len(64 * SMALL_LIMIT);
    let mut stream = TcpStream::connect(server.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let request = format!(
        "POST {MESSAGES} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Authorization: {}\r\nContent-Length: {}\r\n\r\n{body}",
        bearer(ADMIN_KEY),
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let (status, head) = read_response(&mut stream);
    assert_eq!(status, 413, "{head}");
    if head.to_ascii_lowercase().contains("connection: close") {
        return;
    }
    // No close announced: the connection must still answer.
    let mut rest = Vec::new();
    let outcome = stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .and_then(|()| stream.read_to_end(&mut rest));
    let rest = String::from_utf8_lossy(&rest);
    assert!(
        rest.starts_with("HTTP/1.1 200"),
        "the 413 answer did not announce `Connection: close` ({head:?}), but the server closed \
         the connection: the next request on it got {rest:?} ({outcome:?})"
    );
}

/// Reads one response with a `content-length` body; answers its status and head.
fn read_response(stream: &mut TcpStream) -> (u16, String) {
    let mut received = Vec::new();
    let mut buffer = [0; 4096];
    loop {
        let read = stream.read(&mut buffer).expect("read the response");
        assert!(read > 0, "connection closed mid-response: {received:?}");
        received.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&received).into_owned();
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        let length: usize = head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .expect("a content-length");
        if body.len() >= length {
            let status = head.split(' ').nth(1).unwrap().parse().unwrap();
            return (status, head.to_owned());
        }
    }
}

#[test]
fn deeply_nested_json_is_rejected_without_harm() {
    let fixture = Fixture::new();
    fixture.rejects(
        "10,000 open brackets",
        fixture.post_bytes(MESSAGES, "[".repeat(10_000)),
        400,
        "malformed_json",
    );
    fixture.rejects(
        "10,000 balanced brackets",
        fixture.post_bytes(
            MESSAGES,
            format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)),
        ),
        400,
        "malformed_json",
    );
    let nested_metadata = format!(
        r#"{{"role": "user", "content": "x", "metadata": {{"a": {}1{}}}}}"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    fixture.rejects(
        "metadata nested 10,000 deep",
        fixture.post_bytes(MESSAGES, nested_metadata),
        400,
        "malformed_json",
    );
    let nested_objects = format!(
        r#"{{"status": "RUNNING", "tool_calls": [{}null{}]}}"#,
        r#"{"a":"#.repeat(10_000),
        "}".repeat(10_000)
    );
    fixture.rejects(
        "tool calls nested 10,000 deep",
        fixture.post_bytes(RUNS, nested_objects),
        400,
        "malformed_json",
    );
    assert_eq!(
        fixture.server.get("/healthz"),
        (200, json!({ "status": "ok" }))
    );
}

#[test]
fn invalid_utf8_is_rejected() {
    let fixture = Fixture::new();
    let mut body = br#"{"role": "user", "content": "caf"#.to_vec();
    body.extend_from_slice(&[0xff, 0xfe, 0xe9]);
    body.extend_from_slice(br#""}"#);
    fixture.rejects(
        "invalid UTF-8 in content",
        fixture.post_bytes(MESSAGES, body),
        400,
        "malformed_json",
    );
    // A lone surrogate escape is valid JSON syntax but not a Unicode scalar value.
    fixture.rejects(
        "a lone surrogate escape",
        fixture.post_bytes(MESSAGES, r#"{"role": "user", "content": "\ud800"}"#),
        400,
        "malformed_json",
    );
    fixture.rejects(
        "invalid UTF-8 in a path segment",
        fixture.raw("GET", "/v1/sessions/%FF%FE", ""),
        400,
        "invalid_path",
    );
    fixture.rejects(
        "non-ASCII tenant header",
        send(fixture.server.request(Method::GET, "/v1/sessions").header(
            "x-memlayer-tenant",
            reqwest::header::HeaderValue::from_bytes(b"caf\xe9").unwrap(),
        )),
        400,
        "invalid_header",
    );
    fixture.rejects(
        "non-ASCII idempotency key",
        send(
            fixture
                .json_request(
                    Method::POST,
                    MESSAGES,
                    r#"{"role": "user", "content": "x"}"#,
                )
                .header(
                    "idempotency-key",
                    reqwest::header::HeaderValue::from_bytes(b"k\xe9y").unwrap(),
                ),
        ),
        400,
        "invalid_header",
    );
}

#[test]
fn nul_characters_in_text_are_422() {
    let fixture = Fixture::new();
    fixture.rejects(
        "NUL in content",
        fixture
            .server
            .post(MESSAGES, &json!({ "role": "user", "content": "a\u{0}b" })),
        422,
        "invalid_value",
    );
    // One bad message rejects the whole batch: nothing of it is stored.
    fixture.rejects(
        "NUL in the second message of a batch",
        fixture.server.post(
            MESSAGES,
            &json!({ "messages": [
                { "role": "user", "content": "fine" },
                { "role": "assistant", "content": "\u{0}" },
            ]}),
        ),
        422,
        "invalid_value",
    );
    fixture.rejects(
        "NUL in a first-use append",
        fixture.server.post(
            "/v1/sessions/chat-2/messages",
            &json!({
                "role": "user",
                "content": "\u{0}",
                "user_id": "alice",
                "agent_id": "helper",
            }),
        ),
        422,
        "invalid_value",
    );
    fixture.rejects(
        "NUL in a run's content",
        fixture.server.post(
            RUNS,
            &json!({ "status": "COMPLETED", "content": "done\u{0}" }),
        ),
        422,
        "invalid_value",
    );
}

#[test]
fn malformed_ids_are_422_invalid_id() {
    let fixture = Fixture::new();
    let long = "x".repeat(129);
    let message = r#"{"role": "user", "content": "x", "user_id": "alice", "agent_id": "helper"}"#;
    // Percent-encoded in the path: the server decodes, then validates.
    for segment in [
        "a%2Fb",
        "%2F",
        "a%20b",
        "%2E%2E",
        "..",
        ".",
        "caf%C3%A9",
        "a%00b",
        long.as_str(),
    ] {
        fixture.rejects(
            &format!("GET session {segment:?}"),
            fixture.raw("GET", &format!("/v1/sessions/{segment}"), ""),
            422,
            "invalid_id",
        );
        fixture.rejects(
            &format!("append to session {segment:?}"),
            fixture.raw("POST", &format!("/v1/sessions/{segment}/messages"), message),
            422,
            "invalid_id",
        );
        fixture.rejects(
            &format!("DELETE session {segment:?}"),
            fixture.raw("DELETE", &format!("/v1/sessions/{segment}"), ""),
            422,
            "invalid_id",
        );
        // Reads of a user's things refuse a malformed user as writes do, instead of
        // answering that such a user has nothing.
        for read in ["memories", "episodes", "lessons"] {
            fixture.rejects(
                &format!("GET {read} of user {segment:?}"),
                fixture.raw("GET", &format!("/v1/users/{segment}/{read}"), ""),
                422,
                "invalid_id",
            );
        }
    }
    for (field, bad) in [
        ("session_id", "a/b"),
        ("session_id", ".."),
        ("session_id", ""),
        ("user_id", "alice smith"),
        ("user_id", ""),
        ("user_id", long.as_str()),
        ("agent_id", "a/b"),
        ("flow_id", "flow\nnext"),
    ] {
        let mut body = json!({ "session_id": "chat-9", "user_id": "bob", "agent_id": "helper" });
        body[field] = json!(bad);
        fixture.rejects(
            &format!("create with {field} {bad:?}"),
            fixture.server.post("/v1/sessions", &body),
            422,
            "invalid_id",
        );
    }
    fixture.rejects(
        "first-use append with a bad user id",
        fixture.server.post(
            "/v1/sessions/chat-9/messages",
            &json!({ "role": "user", "content": "x", "user_id": "../etc", "agent_id": "helper" }),
        ),
        422,
        "invalid_id",
    );
    fixture.rejects(
        "a run id with a slash",
        fixture
            .server
            .post(RUNS, &json!({ "run_id": "r/2", "status": "RUNNING" })),
        422,
        "invalid_id",
    );
    fixture.rejects(
        "an idempotency key with a space",
        send(
            fixture
                .json_request(
                    Method::POST,
                    MESSAGES,
                    r#"{"role": "user", "content": "x"}"#,
                )
                .header("idempotency-key", "my key"),
        ),
        422,
        "invalid_id",
    );
    fixture.rejects(
        "an idempotency key field over 128 characters",
        fixture.server.post(
            MESSAGES,
            &json!({ "role": "user", "content": "x", "idempotency_key": long }),
        ),
        422,
        "invalid_id",
    );
    for query in ["user_id=a%2Fb", "agent_id=a%20b", "user_id=.."] {
        fixture.rejects(
            &format!("listing with {query}"),
            fixture.server.get(&format!("/v1/sessions?{query}")),
            422,
            "invalid_id",
        );
    }
    for tenant in ["a/b", "a b", "..", ""] {
        fixture.rejects(
            &format!("tenant {tenant:?}"),
            send(
                fixture
                    .server
                    .request(Method::GET, SESSION)
                    .header("x-memlayer-tenant", tenant),
            ),
            422,
            "invalid_id",
        );
    }

    // The longest valid id and the whole alphabet are accepted.
    let longest = "y".repeat(128);
    let (status, _) = fixture.server.post(
        &format!("/v1/sessions/{longest}/messages"),
        &json!({ "role": "user", "content": "x", "user_id": "a.b_c-d:e@f+g", "agent_id": "Z9" }),
    );
    assert_eq!(status, 201);
}

#[test]
fn out_of_range_paging_is_rejected() {
    let fixture = Fixture::new();
    for (query, status, code) in [
        ("page_size=-1", 400, "invalid_query"),
        ("page_size=abc", 400, "invalid_query"),
        ("page_size=99999999999999999999999", 400, "invalid_query"),
        ("page=-1", 400, "invalid_query"),
        ("page=18446744073709551616", 400, "invalid_query"),
        // Beyond the int64 the document gives the page number.
        ("page=9223372036854775808", 400, "invalid_query"),
        ("colour=red", 400, "invalid_query"),
        ("page_size=0", 422, "invalid_value"),
        ("page_size=101", 422, "invalid_value"),
        ("page_size=1000000", 422, "invalid_value"),
    ] {
        fixture.rejects(
            &format!("listing with {query}"),
            fixture.server.get(&format!("/v1/sessions?{query}")),
            status,
            code,
        );
    }
    // A page past the end is empty, however far past.
    let (status, far) = fixture.server.get("/v1/sessions?page=9223372036854775807");
    assert_eq!((status, &far["content"]), (200, &json!([])), "{far}");
    for (query, status, code) in [
        ("limit=-1", 400, "invalid_query"),
        ("from=-1", 400, "invalid_query"),
        ("limit=99999999999999999999999", 400, "invalid_query"),
        ("from=18446744073709551616", 400, "invalid_query"),
        ("from=9223372036854775808", 400, "invalid_query"),
        ("offset=3", 400, "invalid_query"),
        ("limit=0", 422, "invalid_value"),
        ("limit=1001", 422, "invalid_value"),
    ] {
        fixture.rejects(
            &format!("messages with {query}"),
            fixture.server.get(&format!("{MESSAGES}?{query}")),
            status,
            code,
        );
    }

    // The edges that are allowed.
    let (status, page) = fixture
        .server
        .get("/v1/sessions?page_size=100&page=1000000000000000");
    assert_eq!(
        (status, &page["content"], &page["total_elements"]),
        (200, &json!([]), &json!(1))
    );
    let (status, page) = fixture.server.get(&format!("{MESSAGES}?limit=1000"));
    assert_eq!(
        (status, page["messages"].as_array().map(Vec::len)),
        (200, Some(2))
    );
    let (status, page) = fixture
        .server
        .get(&format!("{MESSAGES}?from=9223372036854775807&limit=1000"));
    assert_eq!(
        (status, page),
        (200, json!({ "session_id": "chat-1", "messages": [] }))
    );
}

#[test]
fn ambiguous_or_empty_appends_are_422() {
    let fixture = Fixture::new();
    let too_many: Vec<Value> = (0..1001)
        .map(|i| json!({ "role": "user", "content": format!("{i}") }))
        .collect();
    for (what, body) in [
        (
            "both messages and role",
            json!({
                "messages": [{ "role": "user", "content": "a" }],
                "role": "user",
                "content": "b",
            }),
        ),
        (
            "both messages and metadata",
            json!({ "messages": [{ "role": "user", "content": "a" }], "metadata": {} }),
        ),
        ("nothing", json!({})),
        ("an empty batch", json!({ "messages": [] })),
        ("role without content", json!({ "role": "user" })),
        ("content without role", json!({ "content": "x" })),
        ("1001 messages", json!({ "messages": too_many })),
        (
            "user without agent",
            json!({ "role": "user", "content": "x", "user_id": "alice" }),
        ),
        (
            "flow without owner",
            json!({ "role": "user", "content": "x", "flow_id": "f" }),
        ),
        (
            "session metadata without owner",
            json!({ "role": "user", "content": "x", "session_metadata": {} }),
        ),
    ] {
        fixture.rejects(
            what,
            fixture.server.post(MESSAGES, &body),
            422,
            "invalid_value",
        );
    }
}

#[test]
fn invalid_timestamps_are_422() {
    let fixture = Fixture::new();
    for timestamp in [
        "yesterday",
        "",
        "2026-05-06",
        "2026-05-06 10:00:00",
        "2026-13-01T00:00:00Z",
        "1969-12-31T23:59:59Z",
    ] {
        fixture.rejects(
            &format!("timestamp {timestamp:?}"),
            fixture.server.post(
                MESSAGES,
                &json!({ "role": "user", "content": "x", "timestamp": timestamp }),
            ),
            422,
            "invalid_value",
        );
    }
}

#[test]
fn unknown_routes_are_404_and_wrong_methods_405() {
    let fixture = Fixture::new();
    for (method, path) in [
        (Method::GET, "/"),
        (Method::GET, "/v2/sessions"),
        (Method::GET, "/v1"),
        (Method::GET, "/v1/sessions/"),
        (Method::GET, "/v1/sessions/chat-1/unknown"),
        (Method::GET, "/v1/sessions/chat-1/messages/0/x"),
        (Method::DELETE, "/v1/sessions/chat-1/runs/r1"),
    ] {
        let answer = send(fixture.json_request(method.clone(), path, "{}"));
        fixture.rejects(&format!("{method} {path}"), answer, 404, "route_not_found");
    }
    for (method, path) in [
        (Method::PUT, "/v1/sessions"),
        (Method::DELETE, "/v1/sessions"),
        (Method::POST, SESSION),
        (Method::PUT, SESSION),
        (Method::PATCH, SESSION),
        (Method::DELETE, MESSAGES),
        (Method::PUT, RUNS),
        (Method::POST, "/v1/sessions/chat-1/messages/0"),
        (Method::POST, "/healthz"),
    ] {
        let answer = send(fixture.json_request(method.clone(), path, "{}"));
        fixture.rejects(
            &format!("{method} {path}"),
            answer,
            405,
            "method_not_allowed",
        );
    }
}

/// Everything the store file holds, read through the store's public API after the server
/// stopped: sessions with their messages, runs and summaries in every tenant the tests use,
/// settings, memories, vectors, keys, erasure jobs and receipts, retention and the indexing
/// counters. Unlike [`Fixture::snapshot`], it also sees what the API does not show.
fn store_contents(path: &std::path::Path) -> String {
    use std::fmt::Write as _;
    let store = Store::open(path).expect("open the stopped server's store");
    let eraser = store
        .take_eraser()
        .expect("nothing else erases from this store");
    let mut out = String::new();
    for tenant in ["default", "acme"] {
        let listing = store
            .sessions()
            .list_sessions(
                &Access::tenant_wide(tenant),
                &SessionFilter::default(),
                0,
                MAX_PAGE_SIZE,
            )
            .unwrap();
        writeln!(out, "{tenant}: {} sessions", listing.total).unwrap();
        for session in listing.items {
            let id = session.id.clone();
            writeln!(out, "{session:?}").unwrap();
            writeln!(
                out,
                "{:?}",
                store
                    .sessions()
                    .messages(&Access::tenant_wide(tenant), &id, 0, usize::MAX)
                    .unwrap()
            )
            .unwrap();
            writeln!(
                out,
                "{:?}",
                store
                    .sessions()
                    .runs(&Access::tenant_wide(tenant), &id, 0, usize::MAX)
                    .unwrap()
            )
            .unwrap();
            writeln!(
                out,
                "{:?}",
                store
                    .sessions()
                    .summary(&Access::tenant_wide(tenant), &id)
                    .unwrap()
            )
            .unwrap();
        }
        for agent in [None, Some("helper")] {
            writeln!(
                out,
                "{:?}",
                store.tenants().settings(tenant, agent).unwrap()
            )
            .unwrap();
        }
        writeln!(out, "{:?}", eraser.receipts(tenant, 1_000).unwrap()).unwrap();
    }
    writeln!(
        out,
        "{:?}",
        store.feed().all_messages(None, usize::MAX).unwrap()
    )
    .unwrap();
    writeln!(out, "{:?}", store.feed().vectors(None, usize::MAX).unwrap()).unwrap();
    writeln!(
        out,
        "{:?}",
        store.memories().memories_after(0, usize::MAX).unwrap()
    )
    .unwrap();
    writeln!(out, "{:?}", store.keys().list_keys(None).unwrap()).unwrap();
    writeln!(out, "{:?}", eraser.pending_jobs().unwrap()).unwrap();
    writeln!(out, "{:?}", store.tenants().retention_rules().unwrap()).unwrap();
    writeln!(
        out,
        "outbox {} vectors_version {}",
        store.feed().outbox_head().unwrap(),
        store.feed().vectors_version().unwrap()
    )
    .unwrap();
    store.shutdown();
    out
}

/// Bad requests of every kind, on every body-taking resource: each answers a clear 4xx in the
/// error shape, and the store file's whole content, read after the server stopped, is what it
/// was before them.
#[test]
fn bad_requests_of_every_kind_leave_the_store_file_unchanged() {
    let mut fixture = Fixture::new();
    let server = &fixture.server;
    let (status, answer) = server.put("/v1/settings", &json!({ "max_turns": 6 }));
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = server.put(
        "/v1/admin/retention",
        &json!({ "conversation_retention_days": 90 }),
    );
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = server.post(
        "/v1/users/alice/memories",
        &json!({ "text": "Alice drinks green tea.", "type": "preference" }),
    );
    assert_eq!(status, 201, "{answer}");
    // Recall waits until every message is embedded, so nothing is left for the pipeline to
    // write while the bad requests run.
    let (status, answer) = server.post(
        "/v1/recall",
        &json!({ "session_id": "chat-1", "query": "hello" }),
    );
    assert_eq!(status, 200, "{answer}");
    fixture.server.restart();
    fixture.server.stop();
    let before = store_contents(&fixture.server.store_path());
    fixture.server.restart();
    fixture.before = fixture.snapshot();

    let mut answers: Vec<(String, (u16, Value), u16, &str)> = Vec::new();
    let mut expect = |what: &str, answer: (u16, Value), status: u16, code: &'static str| {
        answers.push((what.to_owned(), answer, status, code));
    };
    let server = &fixture.server;

    // Oversized bodies, each on a connection of its own (see
    // `a_413_does_not_break_the_next_request_on_the_connection`).
    let alone = reqwest::blocking::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let over_limit = body_of_len(ServerConfig::default().max_body_bytes + 1);
    for path in [
        MESSAGES,
        "/v1/recall",
        "/v1/users/alice/memories",
        "/v1/settings",
    ] {
        let method = if path == "/v1/settings" {
            Method::PUT
        } else {
            Method::POST
        };
        expect(
            &format!("oversized {method} {path}"),
            send(
                alone
                    .request(method, format!("{}{path}", server.base_url()))
                    .header("content-type", "application/json")
                    .header("authorization", bearer(ADMIN_KEY))
                    .body(over_limit.clone()),
            ),
            413,
            "payload_too_large",
        );
    }

    // Deep nesting: where any JSON value is accepted, the parser's depth limit refuses it;
    // where a string is expected, the first level already is the wrong type.
    let deep = format!("{}{}", "[".repeat(5_000), "]".repeat(5_000));
    for (method, path, body, code) in [
        (
            Method::POST,
            "/v1/sessions",
            format!(r#"{{"user_id": "bob", "agent_id": "helper", "metadata": {{"a": {deep}}}}}"#),
            "malformed_json",
        ),
        (
            Method::PUT,
            "/v1/settings",
            format!(r#"{{"max_turns": {deep}}}"#),
            "malformed_json",
        ),
        (
            Method::POST,
            "/v1/sessions/chat-1/tools/call",
            format!(r#"{{"name": "clear_session", "arguments": {deep}}}"#),
            "malformed_json",
        ),
        (
            Method::POST,
            "/v1/recall",
            format!(r#"{{"query": {deep}}}"#),
            "invalid_body",
        ),
        (
            Method::POST,
            "/v1/users/alice/memories",
            format!(r#"{{"text": "x", "type": "fact", "tags": {deep}}}"#),
            "invalid_body",
        ),
    ] {
        expect(
            &format!("deep nesting {method} {path}"),
            send(fixture.json_request(method.clone(), path, body)),
            400,
            code,
        );
    }
    // A tool call's arguments as JSON text nested deeper than serde_json's recursion limit.
    let deep_text = serde_json::to_string(&deep).unwrap();
    expect(
        "deep nesting inside tool-call arguments text",
        fixture.post_bytes(
            "/v1/sessions/chat-1/tools/call",
            format!(r#"{{"name": "memory_remember", "arguments": {deep_text}}}"#),
        ),
        422,
        "invalid_arguments",
    );

    // Invalid UTF-8.
    for (path, field) in [
        ("/v1/users/alice/memories", "text"),
        ("/v1/recall", "query"),
        ("/v1/sessions/chat-1/tools/call", "name"),
        ("/v1/sessions", "user_id"),
    ] {
        let mut body = format!(r#"{{"{field}": "caf"#).into_bytes();
        body.extend_from_slice(&[0xc3, 0x28, 0xff]);
        body.extend_from_slice(br#""}"#);
        expect(
            &format!("invalid UTF-8 to {path}"),
            fixture.post_bytes(path, body),
            400,
            "malformed_json",
        );
    }

    // Huge limits and page sizes.
    for (path, status, code) in [
        ("/v1/sessions?page_size=4294967296", 422, "invalid_value"),
        (
            "/v1/sessions?page_size=18446744073709551616",
            400,
            "invalid_query",
        ),
        (
            "/v1/sessions/chat-1/messages?limit=18446744073709551615",
            422,
            "invalid_value",
        ),
        (
            "/v1/sessions/chat-1/search?q=hello&limit=1000000",
            422,
            "invalid_value",
        ),
        ("/v1/admin/erasures?limit=1000000", 422, "invalid_value"),
    ] {
        expect(&format!("GET {path}"), server.get(path), status, code);
    }
    for (path, body) in [
        (
            "/v1/recall",
            json!({ "session_id": "chat-1", "query": "x", "k": 1_000_000 }),
        ),
        (
            "/v1/users/alice/memories/search",
            json!({ "query": "x", "k": u64::MAX }),
        ),
    ] {
        expect(
            &format!("huge k to {path}"),
            server.post(path, &body),
            422,
            "invalid_value",
        );
    }

    // Negative numbers.
    for (method, path, body) in [
        (
            Method::POST,
            MESSAGES,
            r#"{"role": "user", "content": "x", "token_count": -1}"#,
        ),
        (
            Method::POST,
            "/v1/recall",
            r#"{"session_id": "chat-1", "query": "x", "k": -1}"#,
        ),
        (
            Method::POST,
            "/v1/recall",
            r#"{"session_id": "chat-1", "query": "x", "exclude_indices": [-1]}"#,
        ),
        (
            Method::POST,
            "/v1/recall",
            r#"{"session_id": "chat-1", "query": "x", "exclude_indices": [9223372036854775808]}"#,
        ),
        (
            Method::PUT,
            "/v1/admin/retention",
            r#"{"conversation_retention_days": -5}"#,
        ),
        (
            Method::POST,
            "/v1/keys",
            r#"{"role": "service", "expires_in_days": -1}"#,
        ),
        (
            Method::POST,
            "/v1/users/alice/memories",
            r#"{"text": "x", "type": "fact", "source": {"session_id": "chat-1", "index": -1}}"#,
        ),
    ] {
        expect(
            &format!("negative number {method} {path} {body}"),
            send(fixture.json_request(method.clone(), path, body)),
            400,
            "invalid_body",
        );
    }
    expect(
        "negative page",
        server.get("/v1/sessions?page=-1"),
        400,
        "invalid_query",
    );
    expect(
        "a negative setting",
        server.put("/v1/settings", &json!({ "max_turns": -1 })),
        422,
        "invalid_setting",
    );

    // Unknown fields.
    for (method, path, body) in [
        (
            Method::POST,
            "/v1/recall",
            json!({ "session_id": "chat-1", "query": "x", "topk": 3 }),
        ),
        (
            Method::POST,
            "/v1/keys",
            json!({ "role": "service", "admin": true }),
        ),
        (Method::PUT, "/v1/admin/retention", json!({ "days": 3 })),
        (
            Method::POST,
            "/v1/users/alice/memories",
            json!({ "text": "x", "type": "fact", "user_id": "bob" }),
        ),
        (
            Method::POST,
            "/v1/users/alice/memories/search",
            json!({ "query": "x", "limit": 3 }),
        ),
        (
            Method::POST,
            "/v1/sessions/chat-1/context",
            json!({ "budget": 100 }),
        ),
        (
            Method::POST,
            "/v1/sessions/chat-1/tools/call",
            json!({ "name": "clear_session", "arguments": {}, "id": "call-1" }),
        ),
    ] {
        expect(
            &format!("unknown field {method} {path}"),
            send(fixture.json_request(method.clone(), path, body.to_string())),
            400,
            "invalid_body",
        );
    }
    expect(
        "an unknown setting",
        server.put("/v1/settings", &json!({ "max_turnz": 3 })),
        422,
        "invalid_setting",
    );
    expect(
        "unknown tool arguments",
        server.post(
            "/v1/sessions/chat-1/tools/call",
            &json!({ "name": "clear_session", "arguments": { "force": true } }),
        ),
        422,
        "invalid_arguments",
    );

    // Path traversal in ids, plain and percent-encoded, in every kind of path parameter.
    for (method, target, body) in [
        ("GET", "/v1/sessions/..%2F..%2Fetc%2Fpasswd", ""),
        ("DELETE", "/v1/sessions/%2E%2E", ""),
        ("POST", "/v1/sessions/%2E%2E%2Fchat-1/clear", ""),
        ("DELETE", "/v1/sessions/..%2Fchat-1/messages/0", ""),
        ("DELETE", "/v1/users/..%2Falice", ""),
        ("GET", "/v1/users/%2E%2E/memories", ""),
        (
            "POST",
            "/v1/users/..%5Calice/memories",
            r#"{"text": "x", "type": "fact"}"#,
        ),
        (
            "PUT",
            "/v1/agents/..%2F..%2Fhelper/settings",
            r#"{"max_turns": 3}"#,
        ),
        ("DELETE", "/v1/agents/%2E%2E/settings", ""),
    ] {
        expect(
            &format!("traversal {method} {target}"),
            fixture.raw(method, target, body),
            422,
            "invalid_id",
        );
    }
    for (path, body) in [
        ("/v1/recall", json!({ "user_id": "../alice", "query": "x" })),
        ("/v1/recall", json!({ "session_id": "..", "query": "x" })),
        (
            "/v1/users/alice/memories",
            json!({ "text": "x", "type": "fact", "agent_id": "../helper" }),
        ),
        ("/v1/keys", json!({ "role": "user", "user_id": "../alice" })),
    ] {
        expect(
            &format!("traversal in {path} {body}"),
            server.post(path, &body),
            422,
            "invalid_id",
        );
    }

    // NUL bytes.
    expect(
        "NUL in a session id",
        fixture.raw("GET", "/v1/sessions/chat%00-1", ""),
        422,
        "invalid_id",
    );
    expect(
        "NUL in a memory",
        server.post(
            "/v1/users/alice/memories",
            &json!({ "text": "tea\u{0}", "type": "fact" }),
        ),
        422,
        "invalid_value",
    );
    expect(
        "NUL in a recall query's user id",
        server.post(
            "/v1/recall",
            &json!({ "user_id": "alice\u{0}", "query": "x" }),
        ),
        422,
        "invalid_id",
    );
    expect(
        "NUL in a tool call's remembered text",
        server.post(
            "/v1/sessions/chat-1/tools/call",
            &json!({
                "name": "memory_remember",
                "arguments": { "text": "\u{0}", "type": "fact" },
            }),
        ),
        422,
        "invalid_value",
    );
    // A blank memory query could only match nothing, which a caller would read as "nothing
    // is remembered": refused on both routes that recall memories, as /v1/recall refuses one.
    for (what, query) in [
        ("a blank", " \n\t"),
        ("an empty", ""),
        ("a NUL-bearing", "tea\u{0}"),
    ] {
        expect(
            &format!("{what} memory search query"),
            server.post(
                "/v1/users/alice/memories/search",
                &json!({ "query": query }),
            ),
            422,
            "invalid_value",
        );
        expect(
            &format!("{what} memory_recall query"),
            server.post(
                "/v1/sessions/chat-1/tools/call",
                &json!({ "name": "memory_recall", "arguments": { "query": query } }),
            ),
            422,
            "invalid_value",
        );
    }

    let wrong: Vec<String> = answers
        .iter()
        .filter(|(_, (status, body), expected, code)| {
            let shaped = body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
                && body.as_object().is_some_and(|o| o.len() == 1)
                && body["error"].as_object().is_some_and(|o| o.len() == 2);
            (*status, body["error"]["code"].as_str()) != (*expected, Some(*code)) || !shaped
        })
        .map(|(what, answer, status, code)| {
            format!(
                "{what}: expected {status} {code}, got {} {}",
                answer.0, answer.1
            )
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{} wrong answers:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    assert_eq!(fixture.snapshot(), fixture.before, "the API shows a change");

    fixture.server.stop();
    let after = store_contents(&fixture.server.store_path());
    assert!(
        after == before,
        "the store changed:\nbefore:\n{before}\nafter:\n{after}"
    );
    fixture.server.restart();
}

/// Every body is a JSON object: an array of the fields in order, which serde would read
/// into a struct, is refused like any other shape the document does not have.
#[test]
fn bodies_that_are_not_objects_are_refused() {
    let fixture = Fixture::new();
    for (method, path, body) in [
        (Method::PUT, "/v1/admin/retention", "[null]"),
        (Method::POST, "/v1/recall", r#"["hello", 5]"#),
        (Method::POST, "/v1/sessions", "7"),
    ] {
        let answer = send(fixture.json_request(method, path, body));
        fixture.rejects(path, answer, 400, "invalid_body");
    }
}
