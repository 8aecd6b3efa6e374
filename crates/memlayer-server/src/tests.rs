//! Router-level tests of what operating the server needs: the OpenAPI document covers every
//! route, the docs page, request ids, load shedding, timeouts, compression and metrics. Each
//! test drives `router(state)` with `tower::ServiceExt::oneshot` over a real store in a
//! temporary directory and the real embedding model (loaded once per test binary).

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::io::Read;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use http_body::Frame;
use memlayer_embed::Embedder;
use memlayer_index::{Recall, RecallOptions};
use memlayer_store::Store;
use serde_json::Value;
use tempfile::TempDir;
use tokio::sync::oneshot;
use tower::ServiceExt;

use crate::{AppState, ServerConfig, router};

// Authentication and authorisation of every route.
mod auth;

fn embedder() -> Embedder {
    memlayer_embed::test_support::shared_embedder()
}

/// The configured admin key (tenant `default`) every fixture accepts and [`request`] sends.
const ADMIN_KEY: &str = "test-admin-key-0123456789abcdef0123456789abcdef";

/// Runs a store future to completion from synchronous code that may itself be inside a
/// runtime (a `#[tokio::test]`): on a thread and runtime of its own.
fn block_on<T: Send>(future: impl std::future::Future<Output = T> + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap()
                    .block_on(future)
            })
            .join()
            .unwrap()
    })
}

/// A router over a new store; the directory lives as long as the fixture.
struct Fixture {
    router: Router,
    store: Store,
    _dir: TempDir,
}

impl Fixture {
    fn new() -> Self {
        Self::with_config(ServerConfig::default())
    }

    fn with_config(config: ServerConfig) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("memlayer.redb")).unwrap();
        let recall = Recall::open(store.clone(), embedder(), RecallOptions::default()).unwrap();
        block_on(store.keys().bootstrap_keys(Some(ADMIN_KEY))).unwrap();
        Self {
            router: router(AppState::new(store.clone(), recall, config).unwrap()),
            store,
            _dir: dir,
        }
    }

    async fn send(&self, request: Request<Body>) -> Answer {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        Answer {
            status: parts.status,
            headers: parts.headers,
            bytes,
        }
    }

    async fn get(&self, path: &str) -> Answer {
        self.send(request(Method::GET, path, Body::empty())).await
    }

    /// A user key of `user`, whose session `{user}s` holds one message. Stored through the
    /// store, not the API: on a loaded machine an append can outlast a test's short request
    /// timeout.
    async fn user_with_session(&self, user: &str) -> String {
        let new = memlayer_store::NewKey {
            tenant: "default".into(),
            role: memlayer_store::KeyRole::User,
            user_id: Some(user.into()),
            name: None,
            expires_at: None,
        };
        let key = self.store.keys().create_key(new).await.unwrap().secret;
        let append = memlayer_store::Append {
            messages: vec![memlayer_store::NewMessage::new(
                memlayer_store::Role::User,
                "hello",
                1,
            )],
            create: Some(memlayer_store::NewSession {
                user_id: user.into(),
                agent_id: "agent".into(),
                ..Default::default()
            }),
            idempotency_key: None,
        };
        let access = memlayer_store::Access::tenant_wide("default");
        let session = format!("{user}s");
        self.store
            .sessions()
            .append(&access, &session, append)
            .await
            .unwrap();
        key
    }

    /// A read of `user`'s session `{user}s`, held open until dropped: an erasure's
    /// compaction waits for it.
    fn held_read(&self, user: &str) -> memlayer_store::SessionSnapshot {
        self.store
            .sessions()
            .snapshot(
                &memlayer_store::Access::tenant_wide("default"),
                &format!("{user}s"),
            )
            .unwrap()
            .expect("the user's session")
    }

    /// Polls `location` with `key` until the erasure's receipt.
    async fn receipt(&self, key: &str, location: &str) -> Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let polled = self
                .send(request_with_key(key, Method::GET, location, Body::empty()))
                .await;
            match polled.status {
                StatusCode::OK => return polled.json(),
                StatusCode::ACCEPTED if std::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                other => panic!("{location}: {other} {}", polled.text()),
            }
        }
    }
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    bytes: Bytes,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes)
            .unwrap_or_else(|err| panic!("not JSON ({err}): {:?}", self.text()))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|value| value.to_str().unwrap())
    }

    /// Asserts the API's error shape with `status` and `code`.
    #[track_caller]
    fn assert_error(&self, status: StatusCode, code: &str) {
        let body = self.json();
        assert_eq!(
            (self.status, body["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}"
        );
        assert_eq!(body.as_object().unwrap().len(), 1, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
}

/// A request with the admin key.
fn request(method: Method, path: &str, body: Body) -> Request<Body> {
    request_with_key(ADMIN_KEY, method, path, body)
}

fn request_with_key(key: &str, method: Method, path: &str, body: Body) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, format!("Bearer {key}"))
        .body(body)
        .unwrap()
}

/// A request body that says when the server first reads it and then waits, without a byte,
/// until released (then it is `{}`) or dropped: it keeps its request in flight for as long as
/// a test needs, with no sleeping and no test-only route.
struct HeldBody {
    reading: Option<oneshot::Sender<()>>,
    release: oneshot::Receiver<()>,
    sent: bool,
}

/// The body, a signal that the server is reading it, and the release.
fn held_body() -> (Body, oneshot::Receiver<()>, oneshot::Sender<()>) {
    let (reading, read_started) = oneshot::channel();
    let (release, released) = oneshot::channel();
    let body = HeldBody {
        reading: Some(reading),
        release: released,
        sent: false,
    };
    (Body::new(body), read_started, release)
}

impl http_body::Body for HeldBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(reading) = self.reading.take() {
            let _ = reading.send(());
        }
        if self.sent {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.release).poll(cx) {
            Poll::Ready(_) => {
                self.sent = true;
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"{}")))))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The paths the router serves, read from its `Debug` output: axum has no API that lists
/// routes, but its `Debug` prints every route's path. If an axum upgrade changes that output,
/// the assertions on the result fail loudly rather than pass on an empty list.
fn router_paths(router: &Router) -> BTreeSet<String> {
    let debug = format!("{router:?}");
    let mut paths = BTreeSet::new();
    for (at, _) in debug.match_indices("): \"/") {
        let rest = &debug[at + 4..];
        let path = &rest[..rest.find('"').expect("a closing quote")];
        if !path.contains("__private__axum") {
            paths.insert(path.to_owned());
        }
    }
    paths
}

/// `path` with each `{parameter}` replaced by a value every parameter accepts.
fn concrete(path: &str) -> String {
    path.split('/')
        .map(|segment| {
            if segment.starts_with('{') {
                "0"
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

fn spec_operations(spec: &Value) -> BTreeSet<(String, String)> {
    let mut operations = BTreeSet::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if ["get", "put", "post", "delete", "patch"].contains(&method.as_str()) {
                operations.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    operations
}

/// The routes the router really serves are exactly the documented ones: every path the
/// router holds is probed with every method, and whatever is not refused as an unknown route
/// or a wrong method must be in `/openapi.json`, and the reverse.
#[tokio::test]
async fn every_route_is_in_the_openapi_document() {
    let fixture = Fixture::new();
    let paths = router_paths(&fixture.router);
    assert!(
        paths.contains("/healthz") && paths.contains("/v1/sessions/{session_id}"),
        "the router's Debug output no longer lists paths as expected: {paths:?}"
    );
    let mut served = BTreeSet::new();
    for path in &paths {
        for method in [
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
        ] {
            let answer = fixture
                .send(request(method.clone(), &concrete(path), Body::empty()))
                .await;
            let unrouted = answer.status == StatusCode::METHOD_NOT_ALLOWED
                || (answer.status == StatusCode::NOT_FOUND
                    && answer.json()["error"]["code"] == "route_not_found");
            if !unrouted {
                served.insert((method.to_string(), path.clone()));
            }
        }
    }
    let spec = fixture.get("/openapi.json").await.json();
    let documented = spec_operations(&spec);
    let undocumented: Vec<_> = served.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "routes missing from the OpenAPI document: {undocumented:?}"
    );
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        unserved.is_empty(),
        "documented but not served: {unserved:?}"
    );
    for expected in [
        ("GET", "/v1/sessions"),
        ("POST", "/v1/sessions/{session_id}/messages"),
        ("POST", "/v1/sessions/{session_id}/runs"),
        ("POST", "/v1/sessions/{session_id}/context"),
        ("GET", "/v1/sessions/{session_id}/entities"),
        ("GET", "/v1/sessions/{session_id}/search"),
        ("POST", "/v1/sessions/{session_id}/clear"),
        ("POST", "/v1/recall"),
        ("PUT", "/v1/agents/{agent_id}/settings"),
        ("GET", "/readyz"),
        ("GET", "/metrics"),
        ("GET", "/docs"),
        ("GET", "/admin"),
    ] {
        let expected = (expected.0.to_owned(), expected.1.to_owned());
        assert!(
            documented.contains(&expected),
            "{expected:?} is not documented"
        );
    }
}

/// `routes!` routes every handler of an entry at every path of the entry, so an entry with
/// two paths would serve methods nobody wrote at one of them.
#[test]
fn each_route_table_entry_is_one_path() {
    for route in crate::api::ROUTES {
        let (_, paths, _) = (route.handlers)();
        let paths: Vec<_> = paths.paths.keys().collect();
        assert_eq!(
            paths.len(),
            1,
            "one entry of api::ROUTES has paths {paths:?}"
        );
    }
}

/// The document is OpenAPI 3.1, every reference resolves, every operation documents the error
/// shape, and every `/v1` operation the tenant header.
#[test]
fn identifiers_carry_the_rule_the_server_enforces() {
    use crate::openapi::{ID_PATTERN, IDENTIFIERS};
    let spec: Value = serde_json::from_str(&crate::openapi::OPENAPI_JSON).unwrap();
    let is_constrained = |schema: &Value| {
        schema["pattern"] == ID_PATTERN
            && schema["minLength"] == 1
            && schema["maxLength"] == memlayer_store::MAX_ID_LEN
    };
    let mut parameters = 0;
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            for parameter in operation["parameters"].as_array().into_iter().flatten() {
                let name = parameter["name"].as_str().unwrap();
                let schema = &parameter["schema"];
                if IDENTIFIERS.contains(&name) && schema["type"] == "string" {
                    assert!(is_constrained(schema), "{method} {path}: {parameter}");
                    parameters += 1;
                }
            }
        }
    }
    // The tenant header on every /v1 operation, and the ids in paths and queries.
    assert!(parameters > 50, "{parameters}");
    let schemas = spec["components"]["schemas"].as_object().unwrap();
    let append = &schemas["AppendRequest"]["properties"];
    for field in ["user_id", "agent_id", "flow_id"] {
        assert!(is_constrained(&append[field]), "{field}: {}", append[field]);
    }
}

proptest::proptest! {
    /// The pattern the document gives identifiers says exactly what the server accepts.
    #[test]
    fn the_identifier_pattern_is_what_validate_id_accepts(id in "[A-Za-z0-9._:@+ /é-]{0,130}|\\.{1,4}") {
        let pattern = regex::Regex::new(crate::openapi::ID_PATTERN).unwrap();
        let documented = pattern.is_match(&id) && (1..=memlayer_store::MAX_ID_LEN).contains(&id.len());
        proptest::prop_assert_eq!(documented, memlayer_store::validate_id("id", &id).is_ok(), "{:?}", id);
    }
}

#[test]
fn the_document_is_complete_and_consistent() {
    let spec: Value = serde_json::from_str(&crate::openapi::OPENAPI_JSON).unwrap();
    assert_eq!(spec["openapi"], "3.1.0");
    assert_eq!(spec["info"]["version"], env!("CARGO_PKG_VERSION"));
    let schemas = spec["components"]["schemas"].as_object().unwrap();
    let error = &schemas["ErrorBody"];
    assert_eq!(error["required"], serde_json::json!(["error"]));
    let detail = schemas[error["properties"]["error"]["$ref"]
        .as_str()
        .unwrap()
        .trim_start_matches("#/components/schemas/")]
    .clone();
    assert_eq!(detail["required"], serde_json::json!(["code", "message"]));

    let text = spec.to_string();
    for (at, _) in text.match_indices("\"$ref\":\"#/components/schemas/") {
        let rest = &text[at + 29..];
        let name = &rest[..rest.find('"').unwrap()];
        assert!(schemas.contains_key(name), "dangling reference to {name}");
    }
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let at = format!("{method} {path}");
            assert!(
                operation["summary"].as_str().is_some_and(|s| !s.is_empty()),
                "{at} has no summary"
            );
            assert_eq!(
                operation["responses"]["5XX"]["content"]["application/json"]["schema"]["$ref"],
                "#/components/schemas/ErrorBody",
                "{at} does not document 5XX"
            );
            let tenant = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["name"] == "x-memlayer-tenant" && p["in"] == "header");
            assert_eq!(tenant, path.starts_with("/v1/"), "{at}: tenant header");
        }
    }
}

/// Every error answer is listed under its own status with the `code`s it can carry (no
/// `4XX` catch-all), in the `ErrorBody` shape, with codes the server defines; every `/v1`
/// operation lists what a key can be refused with, every JSON body what a body can.
#[test]
fn every_error_answer_is_exact() {
    let spec: Value = serde_json::from_str(&crate::openapi::OPENAPI_JSON).unwrap();
    let mut pairs = BTreeSet::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let at = format!("{method} {path}");
            let responses = operation["responses"].as_object().unwrap();
            let codes = |status: &str| -> Vec<String> {
                let response = &responses[status];
                let schema = &response["content"]["application/json"]["schema"];
                assert_eq!(
                    schema["allOf"][0]["$ref"], "#/components/schemas/ErrorBody",
                    "{at} {status}: not an ErrorBody"
                );
                let codes: Vec<String> =
                    schema["allOf"][1]["properties"]["error"]["properties"]["code"]["enum"]
                        .as_array()
                        .unwrap_or_else(|| panic!("{at} {status}: no code enum"))
                        .iter()
                        .map(|code| code.as_str().unwrap().to_owned())
                        .collect();
                assert!(!codes.is_empty(), "{at} {status}: no codes");
                codes
            };
            for status in responses.keys() {
                assert!(
                    !["4XX", "405"].contains(&status.as_str()),
                    "{at} documents {status}"
                );
                if (status.starts_with('4') || status.starts_with('5')) && status != "5XX" {
                    for code in codes(status) {
                        assert!(crate::error::CODES.contains(&code.as_str()), "{at}: {code}");
                        pairs.insert((status.clone(), code));
                    }
                }
            }
            let has = |status: &str, code: &str| {
                responses.contains_key(status) && codes(status).iter().any(|c| c == code)
            };
            if path.starts_with("/v1/") {
                for (status, code) in [
                    ("401", "unauthorized"),
                    ("403", "forbidden"),
                    ("429", "rate_limited"),
                    ("503", "overloaded"),
                ] {
                    assert!(has(status, code), "{at} does not document {status} {code}");
                }
            } else {
                assert!(has("503", "timeout"), "{at} does not document 503 timeout");
            }
            if operation["requestBody"]["content"]["application/json"].is_object() {
                assert!(has("413", "payload_too_large"), "{at}: 413");
                assert!(has("415", "unsupported_media_type"), "{at}: 415");
            }
            let path_parameters = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "path");
            for parameter in path_parameters {
                assert!(has("400", "invalid_path"), "{at}: invalid_path");
                // An empty one would name no route: `404 route_not_found`, no operation's.
                if parameter["schema"]["type"] == "string" {
                    assert!(
                        parameter["schema"]["minLength"].as_u64() >= Some(1),
                        "{at}: {} may be empty",
                        parameter["name"]
                    );
                }
            }
            if operation["parameters"]
                .as_array()
                .is_some_and(|parameters| parameters.iter().any(|p| p["in"] == "query"))
            {
                assert!(has("400", "invalid_query"), "{at}: invalid_query");
            }
        }
    }
    // Every code the server defines is some operation's, but those of no operation (see the
    // document's description) and `internal`, the `5XX` range's.
    let documented: BTreeSet<&str> = pairs.iter().map(|(_, code)| code.as_str()).collect();
    let defined: BTreeSet<&str> = crate::error::CODES
        .iter()
        .copied()
        .filter(|code| !["route_not_found", "method_not_allowed", "internal"].contains(code))
        .collect();
    assert_eq!(documented, defined);
}

/// `error::CODES` is exactly the set of codes the server's and the agent crate's code
/// builds: the fixed ones of `status_and_code`, and those given where a `BadRequest`,
/// `NotFound` or `Invalid` is built (found in the source).
#[test]
fn every_code_the_server_builds_is_listed() {
    fn sources(dir: &std::path::Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with("tests") {
                continue;
            }
            if path.is_dir() {
                sources(&path, found);
            } else if name.ends_with(".rs") {
                found.push(std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut texts = Vec::new();
    sources(&root.join("src"), &mut texts);
    sources(&root.join("../memlayer-agent/src"), &mut texts);
    let built = regex::Regex::new(
        r#"(?:code:\s*|invalid\(\s*|StatusCode::[A-Z_]+,\s*|status\(\),\s*|Rejection::[A-Za-z]+\(_\) => )"([a-z_]+)""#,
    )
    .unwrap();
    let found: BTreeSet<&str> = texts
        .iter()
        .flat_map(|text| built.captures_iter(text))
        .map(|captures| captures.get(1).unwrap().as_str())
        .collect();
    let listed: BTreeSet<&str> = crate::error::CODES.iter().copied().collect();
    assert_eq!(found, listed);
}

/// The enums described for other crates' types list exactly the values those types
/// serialise to. The matches fail to compile when a variant is added.
#[test]
fn mirrored_types_match_the_real_ones() {
    use memlayer_memory::{
        ContextSettings, DropReason, Layer, OutputFormat, Overflow, RecallScope, Strategy,
    };
    use memlayer_store::{MemoryKind, Outcome, Role, RunStatus, SessionState};

    let spec: Value = serde_json::from_str(&crate::openapi::OPENAPI_JSON).unwrap();
    let schemas = &spec["components"]["schemas"];
    fn check<T: serde::Serialize>(schemas: &Value, name: &str, values: &[T]) {
        let expected: Vec<Value> = values
            .iter()
            .map(|value| serde_json::to_value(value).unwrap())
            .collect();
        assert_eq!(
            schemas[name]["enum"].as_array(),
            Some(&expected),
            "the {name} schema"
        );
    }
    let roles = [Role::System, Role::User, Role::Assistant, Role::Tool];
    let _ = |r: Role| match r {
        Role::System | Role::User | Role::Assistant | Role::Tool => {}
    };
    check(schemas, "Role", &roles);
    let states = [SessionState::Active, SessionState::IncompleteTurn];
    let _ = |s: SessionState| match s {
        SessionState::Active | SessionState::IncompleteTurn => {}
    };
    check(schemas, "SessionState", &states);
    let statuses = [
        RunStatus::Running,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ];
    let _ = |s: RunStatus| match s {
        RunStatus::Running | RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled => {}
    };
    check(schemas, "RunStatus", &statuses);
    let strategies = [
        Strategy::FullHistory,
        Strategy::SlidingWindow,
        Strategy::HistoryDepth,
        Strategy::Combined,
    ];
    let _ = |s: Strategy| match s {
        Strategy::FullHistory
        | Strategy::SlidingWindow
        | Strategy::HistoryDepth
        | Strategy::Combined => {}
    };
    check(schemas, "Strategy", &strategies);
    let _ = |o: Overflow| match o {
        Overflow::Drop | Overflow::Summarize => {}
    };
    check(schemas, "Overflow", &[Overflow::Drop, Overflow::Summarize]);
    let _ = |s: RecallScope| match s {
        RecallScope::Session | RecallScope::User => {}
    };
    check(
        schemas,
        "RecallScope",
        &[RecallScope::Session, RecallScope::User],
    );
    let formats = [
        OutputFormat::Openai,
        OutputFormat::Anthropic,
        OutputFormat::Text,
    ];
    let _ = |f: OutputFormat| match f {
        OutputFormat::Openai | OutputFormat::Anthropic | OutputFormat::Text => {}
    };
    check(schemas, "OutputFormat", &formats);
    let layers = [
        Layer::Instructions,
        Layer::Facts,
        Layer::Memories,
        Layer::Lessons,
        Layer::SessionMemory,
        Layer::Summary,
        Layer::Retrieved,
        Layer::EarlierQuestions,
        Layer::Window,
    ];
    let _ = |l: Layer| match l {
        Layer::Instructions
        | Layer::Facts
        | Layer::Memories
        | Layer::Lessons
        | Layer::SessionMemory
        | Layer::Summary
        | Layer::Retrieved
        | Layer::EarlierQuestions
        | Layer::Window => {}
    };
    check(schemas, "Layer", &layers);
    let _ = |r: DropReason| match r {
        DropReason::OutsideWindow | DropReason::OverBudget => {}
    };
    check(
        schemas,
        "DropReason",
        &[DropReason::OutsideWindow, DropReason::OverBudget],
    );
    let kinds = [
        MemoryKind::Fact,
        MemoryKind::Preference,
        MemoryKind::Relationship,
        MemoryKind::Instruction,
    ];
    let _ = |k: MemoryKind| match k {
        MemoryKind::Fact
        | MemoryKind::Preference
        | MemoryKind::Relationship
        | MemoryKind::Instruction => {}
    };
    check(schemas, "MemoryKind", &kinds);
    let outcomes = [Outcome::Success, Outcome::Failure, Outcome::Partial];
    let _ = |o: Outcome| match o {
        Outcome::Success | Outcome::Failure | Outcome::Partial => {}
    };
    check(schemas, "Outcome", &outcomes);

    // Every key of the settings document, and no other.
    let defaults = serde_json::to_value(ContextSettings::default()).unwrap();
    let keys: BTreeSet<_> = defaults.as_object().unwrap().keys().collect();
    let described: BTreeSet<_> = schemas["ContextSettings"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(described, keys);
}

/// The page at `path`, after checking that it is HTML that cannot load anything from
/// elsewhere: memlayer runs air-gapped.
async fn self_contained_page(fixture: &Fixture, path: &str) -> String {
    let answer = fixture.get(path).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(
        answer.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let policy = answer.header("content-security-policy").unwrap();
    assert!(policy.contains("default-src 'none'") && policy.contains("connect-src 'self'"));
    let page = answer.text();
    for remote in ["http://", "https://", "src=\"//", "@import"] {
        assert!(!page.contains(remote), "{path} refers to {remote}");
    }
    assert!(!page.contains("<script src"), "{path} loads a script file");
    page
}

#[tokio::test]
async fn the_docs_page_renders_the_document_and_loads_nothing_from_elsewhere() {
    let page = self_contained_page(&Fixture::new(), "/docs").await;
    assert!(page.contains("fetch(\"/openapi.json\")"));
}

/// The admin page holds the key only for the browser tab: `localStorage` would keep an
/// admin key on disk after the browser closed. What the page does is tested in a real
/// browser by `cargo xtask browser`.
#[tokio::test]
async fn the_admin_page_keeps_the_key_for_the_tab_and_loads_nothing_from_elsewhere() {
    let page = self_contained_page(&Fixture::new(), "/admin").await;
    assert!(page.contains("sessionStorage") && !page.contains("localStorage"));
    assert!(page.contains("\"Bearer \""));
}

#[tokio::test]
async fn request_ids_are_generated_or_echoed() {
    let fixture = Fixture::new();
    let generated = fixture.get("/healthz").await;
    let id = generated
        .header("x-request-id")
        .expect("an id is generated");
    assert_eq!(id.len(), 36, "a UUID: {id}");
    assert_ne!(
        fixture.get("/healthz").await.header("x-request-id"),
        Some(id),
        "each request gets its own"
    );

    let mut given = request(Method::GET, "/v1/sessions/nope", Body::empty());
    given
        .headers_mut()
        .insert("x-request-id", "client-chosen-42".parse().unwrap());
    let answer = fixture.send(given).await;
    answer.assert_error(StatusCode::NOT_FOUND, "session_not_found");
    assert_eq!(answer.header("x-request-id"), Some("client-chosen-42"));
}

/// With one request in flight and a limit of one, the next API request is refused at once
/// with `503`, `Retry-After` and the error shape; the probes still answer; and once the first
/// request finishes the API admits again.
#[tokio::test]
async fn requests_over_the_limit_are_shed_not_queued() {
    let fixture = Fixture::with_config(ServerConfig {
        max_in_flight: 1,
        ..ServerConfig::default()
    });
    let (body, reading, release) = held_body();
    let held = tokio::spawn(fixture.router.clone().oneshot(request(
        Method::PUT,
        "/v1/settings",
        body,
    )));
    // The handler reads the body only after the limit admitted the request.
    tokio::time::timeout(Duration::from_secs(10), reading)
        .await
        .expect("the held request is admitted")
        .unwrap();

    let shed = fixture.get("/v1/sessions").await;
    shed.assert_error(StatusCode::SERVICE_UNAVAILABLE, "overloaded");
    assert_eq!(shed.header("retry-after"), Some("1"));
    assert_eq!(fixture.get("/healthz").await.status, StatusCode::OK);
    let metrics = fixture.get("/metrics").await.text();
    assert!(
        metrics.contains("memlayer_http_requests_in_flight 2\n"),
        "the held request and the scrape itself:\n{metrics}"
    );

    release.send(()).unwrap();
    let first = held.await.unwrap().unwrap();
    assert_eq!(first.status(), StatusCode::OK, "the held request completes");
    assert_eq!(fixture.get("/v1/sessions").await.status, StatusCode::OK);
    let metrics = fixture.get("/metrics").await.text();
    assert!(
        metrics.contains(
            "memlayer_http_requests_total{route=\"/v1/sessions\",method=\"GET\",status=\"5xx\"} 1\n"
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_request_over_the_time_limit_answers_503_timeout() {
    let fixture = Fixture::with_config(ServerConfig {
        request_timeout: Duration::from_millis(100),
        ..ServerConfig::default()
    });
    // Never released: only the timeout can end this request.
    let (body, _reading, _release) = held_body();
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        fixture.send(request(Method::PUT, "/v1/settings", body)),
    )
    .await
    .expect("the server's timeout fires first");
    answer.assert_error(StatusCode::SERVICE_UNAVAILABLE, "timeout");
    assert!(answer.header("x-request-id").is_some());
}

#[tokio::test]
async fn answers_are_gzipped_for_clients_that_accept_it() {
    let fixture = Fixture::new();
    let plain = fixture.get("/openapi.json").await;
    assert_eq!(plain.header("content-encoding"), None);

    let mut asking = request(Method::GET, "/openapi.json", Body::empty());
    asking
        .headers_mut()
        .insert(header::ACCEPT_ENCODING, "gzip".parse().unwrap());
    let zipped = fixture.send(asking).await;
    assert_eq!(zipped.status, StatusCode::OK);
    assert_eq!(zipped.header("content-encoding"), Some("gzip"));
    assert!(zipped.bytes.len() < plain.bytes.len() / 3);
    let mut unzipped = Vec::new();
    flate2::read::GzDecoder::new(&zipped.bytes[..])
        .read_to_end(&mut unzipped)
        .unwrap();
    assert_eq!(unzipped, plain.bytes);
}

#[tokio::test]
async fn metrics_count_requests_by_route_template() {
    let fixture = Fixture::new();
    fixture.get("/v1/sessions/first").await;
    fixture.get("/v1/sessions/second").await;
    fixture.get("/no/such/route").await;
    let answer = fixture.get("/metrics").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(
        answer.header("content-type"),
        Some(crate::metrics::CONTENT_TYPE)
    );
    let text = answer.text();
    for line in [
        "memlayer_http_requests_total{route=\"/v1/sessions/{session_id}\",method=\"GET\",status=\"4xx\"} 2\n",
        "memlayer_http_requests_total{route=\"unmatched\",method=\"GET\",status=\"4xx\"} 1\n",
        "memlayer_http_request_duration_seconds_count{route=\"/v1/sessions/{session_id}\",method=\"GET\"} 2\n",
        "memlayer_http_request_duration_seconds_bucket{le=\"0.005\",route=\"/v1/sessions/{session_id}\",method=\"GET\"}",
        "# TYPE memlayer_http_requests_in_flight gauge\n",
        "memlayer_index_vectors 0\n",
        "memlayer_embeddings_pending 0\n",
        "memlayer_embed_queue_request_batches 0\n",
        "memlayer_embed_queue_background_batches 0\n",
        "# TYPE memlayer_store_commits counter\n",
        "memlayer_store_writes_refused 0\n",
        "# TYPE memlayer_store_size_bytes gauge\n",
        "# TYPE memlayer_disk_free_bytes gauge\n",
        "# TYPE memlayer_disk_size_bytes gauge\n",
    ] {
        assert!(text.contains(line), "no {line:?} in\n{text}");
    }
    assert!(
        !text.contains("first") && !text.contains("/no/such"),
        "raw paths leaked"
    );
    assert!(text.ends_with("# EOF\n"));
}

/// The answer a client gets for `err`.
async fn answer_to(err: crate::ApiError) -> Answer {
    use axum::response::IntoResponse;
    let (parts, body) = err.into_response().into_parts();
    Answer {
        status: parts.status,
        headers: parts.headers,
        bytes: axum::body::to_bytes(body, usize::MAX).await.unwrap(),
    }
}

/// A full disk and a failing one answer typed errors a client can act on, with
/// `Retry-After`, not `500 internal`: `507 storage_full` and `503 storage_unavailable`.
#[tokio::test]
async fn disk_faults_answer_typed_errors_with_retry_after() {
    use std::io::{Error, ErrorKind};

    use memlayer_store::StoreError;

    let full = (StatusCode::INSUFFICIENT_STORAGE, "storage_full");
    let failed = (StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable");
    for (io, (status, code)) in [
        (Error::from(ErrorKind::StorageFull), full),
        (Error::from(ErrorKind::QuotaExceeded), full),
        (Error::other("input/output error"), failed),
    ] {
        let err = StoreError::Backup(std::sync::Arc::new(io));
        let refused = StoreError::WritesRefused {
            cause: Box::new(err.clone()),
        };
        for err in [err, refused] {
            let answer = answer_to(crate::ApiError::from(err)).await;
            answer.assert_error(status, code);
            assert_eq!(answer.header("retry-after"), Some("5"));
            assert!(answer.json()["error"].get("erasure_id").is_none());
        }
    }
    // An erasure the disk interrupted after recording it says which, since it finishes.
    let pending = memlayer_erasure::ErasureError::Pending {
        id: 7,
        source: Box::new(memlayer_erasure::ErasureError::Store(StoreError::Backup(
            std::sync::Arc::new(Error::from(ErrorKind::StorageFull)),
        ))),
    };
    let body = serde_json::to_value(crate::ApiError::from(pending).body()).unwrap();
    assert_eq!(body["error"]["erasure_id"], 7, "{body}");
    assert_eq!(body["error"]["code"], "storage_full", "{body}");
    // So does one whose compaction busy readers postponed, or that other nodes sharing the
    // database have not applied yet: both pass, neither is `500 internal`.
    for source in [
        memlayer_erasure::ErasureError::Store(StoreError::Busy("readers".into())),
        memlayer_erasure::ErasureError::Index(memlayer_index::IndexError::FollowersBehind {
            nodes: 2,
        }),
    ] {
        let pending = memlayer_erasure::ErasureError::Pending {
            id: 8,
            source: Box::new(source),
        };
        let answer = answer_to(crate::ApiError::from(pending)).await;
        answer.assert_error(StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable");
        assert_eq!(answer.header("retry-after"), Some("5"));
        assert_eq!(answer.json()["error"]["erasure_id"], 8);
    }
}

/// A database that fails or cannot be reached passes like a failing disk (`503
/// storage_unavailable`, `Retry-After`), and its message stays in the log: a database error
/// can quote a statement's values. What only a store file can do is `501 not_implemented`.
#[tokio::test]
async fn a_failing_database_and_a_file_only_operation_answer_typed_errors() {
    use axum::response::IntoResponse;
    use memlayer_store::StoreError;

    let answer = |err: StoreError| async move {
        let (parts, body) = crate::ApiError::from(err).into_response().into_parts();
        Answer {
            status: parts.status,
            headers: parts.headers,
            bytes: axum::body::to_bytes(body, usize::MAX).await.unwrap(),
        }
    };
    let secret = "a value the statement quoted";
    let failed = answer(StoreError::Backend {
        source: std::sync::Arc::new(std::io::Error::other(secret)),
    })
    .await;
    failed.assert_error(StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable");
    assert_eq!(failed.header("retry-after"), Some("5"));
    assert!(!failed.json().to_string().contains(secret));

    let unsupported = answer(StoreError::Unsupported("a file backup")).await;
    unsupported.assert_error(StatusCode::NOT_IMPLEMENTED, "not_implemented");
    assert!(
        unsupported.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("a file backup")
    );
}

/// Free disk space below the configured share is a warning in `/readyz`, which stays ready,
/// and a `low` flag in the stats' disk figures; with the warning off there is neither.
#[tokio::test]
async fn low_disk_space_is_a_warning_in_the_readiness_probe_and_the_stats() {
    for (percent, low) in [(100, true), (0, false)] {
        let fixture = Fixture::with_config(ServerConfig {
            disk_warning_free_percent: percent,
            ..ServerConfig::default()
        });
        let ready = fixture.get("/readyz").await;
        assert_eq!(ready.status, StatusCode::OK);
        let warning = &ready.json()["warning"];
        assert_eq!(warning.is_string(), low, "{warning}");
        let stats = fixture.get("/v1/admin/conversations/stats").await.json();
        let disk = &stats["disk"];
        assert_eq!(disk["low"], low, "{stats}");
        assert!(disk["store_bytes"].as_u64().unwrap() > 0, "{stats}");
        assert!(
            disk["free_bytes"].as_u64().unwrap() <= disk["size_bytes"].as_u64().unwrap(),
            "{stats}"
        );
    }
}

/// An erasure that outlasts half the request timeout answers `202` with where its receipt
/// will be, and goes on to its end: here a read held open keeps its compaction waiting (at a
/// million messages the compaction itself takes that long). Before, the request timeout cut
/// it off with `503` part-way. The receipt is the asking user's to read, not another user's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erasure_past_half_the_request_timeout_answers_202_and_finishes() {
    let fixture = Fixture::with_config(ServerConfig {
        // Long enough that the status polls and the last read finish in time on a loaded
        // machine; the held read below keeps the erasure past half of it however fast it is.
        request_timeout: Duration::from_secs(2),
        ..ServerConfig::default()
    });
    let (ann, bob) = (
        fixture.user_with_session("ann").await,
        fixture.user_with_session("bob").await,
    );
    let held = fixture.held_read("bob");

    let deleting = request_with_key(&ann, Method::DELETE, "/v1/sessions/anns", Body::empty());
    let answer = fixture.send(deleting).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.text());
    let running = answer.json();
    assert_eq!(running["status"], "running");
    let id = running["erasure_id"].as_u64().expect("an erasure id");
    let location = format!("/v1/admin/erasures/{id}");
    assert_eq!(answer.header("location"), Some(location.as_str()));

    drop(held);
    let receipt = fixture.receipt(&ann, &location).await;
    assert_eq!(receipt["counts"]["sessions"], 1, "{receipt}");
    assert_eq!(receipt["counts"]["messages"], 1, "{receipt}");
    assert_eq!(receipt["resumed"], false, "not cut off and resumed");
    let status =
        |key: &str| fixture.send(request_with_key(key, Method::GET, &location, Body::empty()));
    status(&bob)
        .await
        .assert_error(StatusCode::NOT_FOUND, "erasure_not_found");
    assert_eq!(status(ADMIN_KEY).await.json(), receipt);
    let gone = fixture.get("/v1/sessions/anns").await;
    gone.assert_error(StatusCode::NOT_FOUND, "session_not_found");
}

/// A model's `memory_forget` (MCP's `tools/call` runs the same code) answers as an erasure
/// route does: past half the request timeout its result is `{erasure_id, status: "running"}`
/// and the erasure goes on to a receipt the session's user reads. Before, the call waited for
/// the receipt, which at a million messages came after the request timeout's `503`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forget_tool_call_past_half_the_request_timeout_answers_running() {
    let fixture = Fixture::with_config(ServerConfig {
        request_timeout: Duration::from_secs(4),
        ..ServerConfig::default()
    });
    let (ann, _bob) = (
        fixture.user_with_session("ann").await,
        fixture.user_with_session("bob").await,
    );
    let call = |name: &str, arguments: Value| {
        let body = serde_json::json!({ "name": name, "arguments": arguments });
        let path = "/v1/sessions/anns/tools/call";
        fixture.send(request_with_key(
            &ann,
            Method::POST,
            path,
            Body::from(body.to_string()),
        ))
    };
    let arguments = serde_json::json!({ "text": "ann keeps bees", "type": "fact" });
    let remembered = call("memory_remember", arguments).await;
    assert_eq!(remembered.status, StatusCode::OK, "{}", remembered.text());
    let memory_id = remembered.json()["result"]["memory"]["memory_id"].clone();
    let held = fixture.held_read("bob");

    let forgetting = call(
        "memory_forget",
        serde_json::json!({ "memory_id": memory_id }),
    )
    .await;
    assert_eq!(forgetting.status, StatusCode::OK, "{}", forgetting.text());
    let result = &forgetting.json()["result"];
    assert_eq!(result["status"], "running", "{result}");
    let id = result["erasure_id"].as_u64().expect("an erasure id");

    drop(held);
    let receipt = fixture
        .receipt(&ann, &format!("/v1/admin/erasures/{id}"))
        .await;
    assert_eq!(receipt["counts"]["memories"], 1, "{receipt}");
    let again = call(
        "memory_forget",
        serde_json::json!({ "memory_id": memory_id }),
    )
    .await;
    again.assert_error(StatusCode::NOT_FOUND, "memory_not_found");
}
