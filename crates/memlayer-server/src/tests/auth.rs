//! Authentication and authorisation of every route, in the manner of meilisearch's
//! `tests/auth/authorization.rs`: [`TABLE`] gives each operation the router serves its access,
//! and every operation is sent with every kind of missing, bad or insufficient key, asserting
//! the exact answer. The operations are read from the router itself (as
//! `every_route_is_in_the_openapi_document` does), and one missing from the table fails the
//! test: a new route cannot ship without deciding who may call it.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use memlayer_store::{KeyRole, NewKey, OPERATOR_TENANT, Timestamp};
use serde_json::{Value, json};

use super::{ADMIN_KEY, Answer, Fixture, concrete, router_paths};

/// Who may call an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Probes, metrics and the documentation: no key needed, any key ignored.
    Public,
    /// `tenant_admin` keys only.
    Admin,
    /// `tenant_admin` and `service` keys; user-scoped keys get `403`.
    Service,
    /// Every role; a user-scoped key only for its own user's objects.
    Owner,
    /// Erasing a user: `tenant_admin`, or the user's own key; `service` gets `403`.
    AdminOrSelf,
    /// Whole-store routes (the backup): `operator` keys only; every tenant's key, its admins'
    /// and the configured admin key included, gets `403`.
    Operator,
}

/// One operation: its access, what to send, and what the two keys that pass authentication
/// but must not reach the victim's objects get.
struct Row {
    method: &'static str,
    path: &'static str,
    access: Access,
    /// Appended to the path (with its `?`).
    query: &'static str,
    /// JSON body, or empty.
    body: &'static str,
    /// Headers besides the key's (the OpenAI endpoint names its conversation in them).
    headers: &'static [(&'static str, &'static str)],
    /// The answer to alice's neighbour mallory, a user key of the same tenant. Only read for
    /// `Owner` and `AdminOrSelf` rows; the others refuse user keys with `403`.
    other_user: u16,
    /// The answer to the admin key of another tenant, sent without a tenant header: it acts
    /// in its own tenant, where the victim's objects do not exist.
    other_tenant: u16,
}

const fn row(
    method: &'static str,
    path: &'static str,
    access: Access,
    other_user: u16,
    other_tenant: u16,
) -> Row {
    Row {
        method,
        path,
        access,
        query: "",
        body: "",
        headers: &[],
        other_user,
        other_tenant,
    }
}

const fn public(path: &'static str) -> Row {
    row("GET", path, Access::Public, 200, 200)
}

impl Row {
    const fn query(mut self, query: &'static str) -> Self {
        self.query = query;
        self
    }

    const fn body(mut self, body: &'static str) -> Self {
        self.body = body;
        self
    }

    const fn headers(mut self, headers: &'static [(&'static str, &'static str)]) -> Self {
        self.headers = headers;
        self
    }
}

use Access::{Admin, AdminOrSelf, Operator, Owner, Service};

const SESSION: &str = "victim-session";
const CANARY: &str = "victim-canary-7f3a";
/// The key of the victim's keyed memory.
const MEMORY_KEY: &str = "seat";

/// Every operation of the API. Add a row for each new route: who may call it, and what the
/// keys that must not reach another user's or tenant's objects get.
const TABLE: &[Row] = &[
    // A user key lists its own user's sessions: naming alice finds nothing.
    row("GET", "/v1/sessions", Owner, 200, 200).query("?user_id=alice"),
    // Creating for another user is refused; another tenant creates its own session.
    row("POST", "/v1/sessions", Owner, 403, 201).body(r#"{"user_id":"alice","agent_id":"a"}"#),
    row("GET", "/v1/sessions/{session_id}", Owner, 404, 404),
    row("DELETE", "/v1/sessions/{session_id}", Owner, 404, 404),
    row("GET", "/v1/sessions/{session_id}/messages", Owner, 404, 404),
    row(
        "POST",
        "/v1/sessions/{session_id}/messages",
        Owner,
        404,
        404,
    )
    .body(r#"{"role":"user","content":"intruder"}"#),
    row("GET", "/v1/sessions/{session_id}/runs", Owner, 404, 404),
    row("POST", "/v1/sessions/{session_id}/runs", Service, 403, 404)
        .body(r#"{"status":"COMPLETED"}"#),
    row("POST", "/v1/sessions/{session_id}/clear", Owner, 404, 404),
    row("GET", "/v1/sessions/{session_id}/search", Owner, 404, 404).query("?q=canary"),
    row("POST", "/v1/sessions/{session_id}/context", Owner, 404, 404).body("{}"),
    row("GET", "/v1/sessions/{session_id}/entities", Owner, 404, 404),
    row(
        "DELETE",
        "/v1/sessions/{session_id}/messages/{index}",
        Owner,
        404,
        404,
    ),
    row("POST", "/v1/recall", Owner, 404, 404)
        .body(r#"{"query":"canary","session_id":"victim-session"}"#),
    row("GET", "/v1/tools", Owner, 200, 200),
    row(
        "POST",
        "/v1/sessions/{session_id}/tools/call",
        Owner,
        404,
        404,
    )
    .body(r#"{"name":"session_search","arguments":{"query":"canary"}}"#),
    // Another user's session is not found; another tenant has no such session. No model is
    // configured here, but the session is checked first, so nothing of the victim's leaks.
    row("POST", "/v1/agents/{agent_id}/runs", Owner, 404, 404).body(
        r#"{"message":"hi","user_id":"alice","session_id":"victim-session"}"#,
    ),
    // The OpenAI-compatible endpoint: the conversation is in headers, checked as a run's.
    row("POST", "/v1/openai/chat/completions", Owner, 404, 404)
        .headers(&[
            ("x-memlayer-session", SESSION),
            ("x-memlayer-user", "alice"),
            ("x-memlayer-agent", "support"),
        ])
        .body(r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#),
    // The MCP server of a session: checked like the tool-call endpoint before any message
    // reaches the MCP transport.
    row("POST", "/v1/sessions/{session_id}/mcp", Owner, 404, 404).body(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"session_search","arguments":{"query":"canary"}}}"#,
    ),
    // A user key reaches its own user's memories only: alice's are not found; another
    // tenant sees its own (empty) ones.
    row("GET", "/v1/users/{user_id}/memories", Owner, 404, 200),
    row("POST", "/v1/users/{user_id}/memories", Owner, 404, 201)
        .body(r#"{"text":"another tenant's memory","type":"fact"}"#),
    row(
        "POST",
        "/v1/users/{user_id}/memories/search",
        Owner,
        404,
        200,
    )
    .body(r#"{"query":"canary"}"#),
    row("POST", "/v1/sessions/{session_id}/end", Owner, 404, 404),
    row(
        "GET",
        "/v1/users/{user_id}/session-memory",
        Owner,
        404,
        404,
    )
    .query("?agent_id=support"),
    // A keyed memory: another user's key is not found; another tenant puts its own.
    row(
        "GET",
        "/v1/users/{user_id}/memories/keys/{key}",
        Owner,
        404,
        404,
    ),
    row(
        "PUT",
        "/v1/users/{user_id}/memories/keys/{key}",
        Owner,
        404,
        201,
    )
    .body(r#"{"text":"another tenant's memory","type":"fact"}"#),
    row("GET", "/v1/memories/{memory_id}", Owner, 404, 404),
    row("DELETE", "/v1/memories/{memory_id}", Owner, 404, 404),
    // Episodes are for tenant-wide keys.
    row("GET", "/v1/users/{user_id}/episodes", Service, 403, 200),
    row("POST", "/v1/users/{user_id}/episodes", Service, 403, 201).body(
        r#"{"task_type":"refund","description":"another tenant's","outcome":"success","lesson":"theirs"}"#,
    ),
    row("GET", "/v1/users/{user_id}/lessons", Service, 403, 200).query("?task_type=refund"),
    row("GET", "/v1/episodes/{episode_id}", Service, 403, 404),
    row("DELETE", "/v1/episodes/{episode_id}", Service, 403, 404),
    // Another tenant erasing "alice" erases its own alice, who has nothing.
    row("DELETE", "/v1/users/{user_id}", AdminOrSelf, 404, 200),
    row("GET", "/v1/admin/conversations/stats", Admin, 403, 404).query("?project_id=default"),
    row("DELETE", "/v1/admin/conversations/purge", Admin, 403, 404)
        .query("?project_id=default&older_than_days=0"),
    row("GET", "/v1/admin/erasures", Admin, 403, 404).query("?project_id=default"),
    // Erasure ids are global: another tenant's admin finds none of this tenant's. Every key
    // follows the `202` of its own erasure; a user key finds only those it asked for
    // (`tests::an_erasure_past_half_the_request_timeout_answers_202_and_finishes`).
    row("GET", "/v1/admin/erasures/{erasure_id}", Owner, 404, 404).query("?project_id=default"),
    row("GET", "/v1/admin/retention", Admin, 403, 200),
    row("PUT", "/v1/admin/retention", Admin, 403, 200)
        .body(r#"{"conversation_retention_days":null}"#),
    // A backup holds every tenant: only the operator's key takes one, no tenant's.
    row("POST", "/v1/admin/backup", Operator, 403, 403),
    row("GET", "/v1/settings", Service, 403, 200),
    row("PUT", "/v1/settings", Admin, 403, 200).body("{}"),
    row("DELETE", "/v1/settings", Admin, 403, 200),
    row("GET", "/v1/agents/{agent_id}/settings", Service, 403, 200),
    row("PUT", "/v1/agents/{agent_id}/settings", Admin, 403, 200).body("{}"),
    row("DELETE", "/v1/agents/{agent_id}/settings", Admin, 403, 200),
    row("GET", "/v1/agents/{agent_id}/memory-config", Service, 403, 200),
    row("PUT", "/v1/agents/{agent_id}/memory-config", Admin, 403, 200).body("{}"),
    row("GET", "/v1/keys", Admin, 403, 200),
    row("POST", "/v1/keys", Admin, 403, 201).body(r#"{"role":"service"}"#),
    row("DELETE", "/v1/keys/{prefix}", Admin, 403, 404),
    public("/healthz"),
    public("/readyz"),
    public("/metrics"),
    public("/openapi.json"),
    public("/docs"),
    public("/admin"),
];

/// The keys a request can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    NoKey,
    NotBearer,
    NotAKey,
    Unknown,
    Revoked,
    Expired,
    /// Another tenant's admin key with `x-memlayer-tenant` naming the victim's tenant.
    OtherTenantNamed,
    /// Another tenant's admin key, no header.
    OtherTenant,
    /// A user key of the victim's tenant, for another user than the victim's.
    OtherUser,
    /// The tenant's service key.
    Service,
    /// A `tenant_admin` key of the victim's tenant, `default`.
    TenantAdmin,
    /// The configured admin key (`admin_key`), a `tenant_admin` key of `default`.
    ConfiguredAdmin,
    /// The operator's key (`memlayer keys create --role operator`), of no tenant.
    Operator,
}

const CASES: [Case; 13] = [
    Case::NoKey,
    Case::NotBearer,
    Case::NotAKey,
    Case::Unknown,
    Case::Revoked,
    Case::Expired,
    Case::OtherTenantNamed,
    Case::OtherTenant,
    Case::OtherUser,
    Case::Service,
    Case::TenantAdmin,
    Case::ConfiguredAdmin,
    Case::Operator,
];

/// The exact answer `row` gets in `case` (status and, for the authorisation answers, the
/// error code); `None` where the key may do what the row does (it is not sent: it would act
/// on the victim's objects). The operator's backup is sent: it changes nothing.
fn expected(row: &Row, case: Case) -> Option<(u16, Option<&'static str>)> {
    if row.access == Access::Public {
        return Some((200, None));
    }
    if case == Case::Operator {
        return Some(if row.access == Operator {
            (200, None)
        } else {
            (403, Some("forbidden"))
        });
    }
    let forbidden = Some((403, Some("forbidden")));
    match case {
        Case::NoKey
        | Case::NotBearer
        | Case::NotAKey
        | Case::Unknown
        | Case::Revoked
        | Case::Expired => Some((401, Some("unauthorized"))),
        Case::OtherTenantNamed => Some((404, Some("tenant_not_found"))),
        Case::OtherTenant => Some((row.other_tenant, None)),
        Case::OtherUser => match row.access {
            Admin | Service | Operator => forbidden,
            Owner | AdminOrSelf => Some((row.other_user, None)),
            Access::Public => unreachable!(),
        },
        Case::Service => match row.access {
            Admin | AdminOrSelf | Operator => forbidden,
            _ => None,
        },
        Case::TenantAdmin | Case::ConfiguredAdmin => match row.access {
            Operator => forbidden,
            _ => None,
        },
        Case::Operator => unreachable!("answered above"),
    }
}

/// The victim's world: alice's session with a canary message and a memory in tenant
/// `default`, a spare key, and every kind of key to attack them with.
struct World {
    fixture: Fixture,
    memory_id: u64,
    episode_id: u64,
    victim_key: String,
    keys: Keys,
}

struct Keys {
    service: String,
    tenant_admin: String,
    operator: String,
    alice: String,
    mallory: String,
    other_tenant: String,
    revoked: String,
    expired: String,
}

fn new_key(tenant: &str, role: KeyRole, user: Option<&str>) -> NewKey {
    NewKey {
        tenant: tenant.into(),
        role,
        user_id: user.map(str::to_owned),
        name: None,
        expires_at: None,
    }
}

impl World {
    async fn new() -> Self {
        let fixture = Fixture::new();
        let store = fixture.store.clone();
        let create = |new: NewKey| {
            let store = store.clone();
            async move { store.keys().create_key(new).await.unwrap() }
        };
        let revoked = create(new_key("default", KeyRole::Service, None)).await;
        store
            .keys()
            .revoke_key(None, &revoked.key.prefix)
            .await
            .unwrap()
            .unwrap();
        let expired = create(NewKey {
            expires_at: Some(Timestamp::from_micros(1)),
            ..new_key("default", KeyRole::TenantAdmin, None)
        })
        .await;
        let keys = Keys {
            service: create(new_key("default", KeyRole::Service, None))
                .await
                .secret,
            tenant_admin: create(new_key("default", KeyRole::TenantAdmin, None))
                .await
                .secret,
            operator: create(new_key(OPERATOR_TENANT, KeyRole::Operator, None))
                .await
                .secret,
            alice: create(new_key("default", KeyRole::User, Some("alice")))
                .await
                .secret,
            mallory: create(new_key("default", KeyRole::User, Some("mallory")))
                .await
                .secret,
            other_tenant: create(new_key("acme", KeyRole::TenantAdmin, None))
                .await
                .secret,
            revoked: revoked.secret,
            expired: expired.secret,
        };
        let victim_key = create(new_key("default", KeyRole::Service, None))
            .await
            .key
            .prefix;

        let appended = fixture
            .send(json_request(
                Method::POST,
                &format!("/v1/sessions/{SESSION}/messages"),
                &json!({
                    "user_id": "alice",
                    "agent_id": "support",
                    "role": "user",
                    "content": format!("{CANARY}: my order 4711 is late"),
                }),
                Some(ADMIN_KEY),
            ))
            .await;
        assert_eq!(appended.status, StatusCode::CREATED, "{}", appended.text());
        let remembered = fixture
            .send(json_request(
                Method::POST,
                "/v1/users/alice/memories",
                &json!({ "text": format!("{CANARY}: alice prefers tea"), "type": "preference" }),
                Some(ADMIN_KEY),
            ))
            .await;
        assert_eq!(
            remembered.status,
            StatusCode::CREATED,
            "{}",
            remembered.text()
        );
        let memory_id = remembered.json()["memory"]["memory_id"].as_u64().unwrap();
        let put = fixture
            .send(json_request(
                Method::PUT,
                &format!("/v1/users/alice/memories/keys/{MEMORY_KEY}"),
                &json!({ "text": format!("{CANARY}: alice's seat is 14C"), "type": "fact" }),
                Some(ADMIN_KEY),
            ))
            .await;
        assert_eq!(put.status, StatusCode::CREATED, "{}", put.text());
        let recorded = fixture
            .send(json_request(
                Method::POST,
                "/v1/users/alice/episodes",
                &json!({
                    "task_type": "refund",
                    "description": "a refund for alice",
                    "outcome": "failure",
                    "lesson": format!("{CANARY}: ask for the receipt"),
                    "source_session_id": SESSION,
                }),
                Some(ADMIN_KEY),
            ))
            .await;
        assert_eq!(recorded.status, StatusCode::CREATED, "{}", recorded.text());
        let episode_id = recorded.json()["episode_id"].as_u64().unwrap();
        Self {
            fixture,
            memory_id,
            episode_id,
            victim_key,
            keys,
        }
    }

    /// `path` with its parameters naming the victim's objects.
    fn concrete(&self, path: &str) -> String {
        path.split('/')
            .map(|segment| match segment {
                "{session_id}" => SESSION.to_owned(),
                "{user_id}" => "alice".to_owned(),
                "{index}" => "0".to_owned(),
                "{agent_id}" => "support".to_owned(),
                "{memory_id}" => self.memory_id.to_string(),
                "{episode_id}" => self.episode_id.to_string(),
                "{prefix}" => self.victim_key.clone(),
                "{erasure_id}" => "1".to_owned(),
                "{key}" => MEMORY_KEY.to_owned(),
                other if other.starts_with('{') => {
                    panic!("no value for {other} in {path}: add one to World::concrete")
                }
                other => other.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("/")
    }

    fn request(&self, row: &Row, case: Case) -> Request<Body> {
        let path = format!("{}{}", self.concrete(row.path), row.query);
        let mut builder = Request::builder()
            .method(row.method)
            .uri(path)
            .header(header::CONTENT_TYPE, "application/json");
        let bearer = |key: &str| format!("Bearer {key}");
        let authorization = match case {
            Case::NoKey => None,
            Case::NotBearer => Some(format!("Basic {}", self.keys.service)),
            Case::NotAKey => Some("Bearer".to_owned()),
            Case::Unknown => Some(bearer(&format!("mlk_0123456789abcdef_{}", "0".repeat(64)))),
            Case::Revoked => Some(bearer(&self.keys.revoked)),
            Case::Expired => Some(bearer(&self.keys.expired)),
            Case::OtherTenantNamed | Case::OtherTenant => Some(bearer(&self.keys.other_tenant)),
            Case::OtherUser => Some(bearer(&self.keys.mallory)),
            Case::Service => Some(bearer(&self.keys.service)),
            Case::TenantAdmin => Some(bearer(&self.keys.tenant_admin)),
            Case::ConfiguredAdmin => Some(bearer(ADMIN_KEY)),
            Case::Operator => Some(bearer(&self.keys.operator)),
        };
        if let Some(value) = authorization {
            builder = builder.header(header::AUTHORIZATION, value);
        }
        if case == Case::OtherTenantNamed {
            builder = builder.header("x-memlayer-tenant", "default");
        }
        for (name, value) in row.headers {
            builder = builder.header(*name, *value);
        }
        builder.body(Body::from(row.body)).unwrap()
    }

    /// What the victim has, read with the admin key: unchanged by the attacks.
    async fn victim(&self) -> Value {
        let get = |path: String| async move {
            self.fixture
                .send(json_request(
                    Method::GET,
                    &path,
                    &Value::Null,
                    Some(ADMIN_KEY),
                ))
                .await
        };
        let session = get(format!("/v1/sessions/{SESSION}")).await.json();
        let memory = get(format!("/v1/memories/{}", self.memory_id)).await.json();
        let episode = get(format!("/v1/episodes/{}", self.episode_id))
            .await
            .json();
        let keys = get("/v1/keys".into()).await.json();
        let victim_key = keys["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|key| key["prefix"] == self.victim_key.as_str())
            .cloned()
            .unwrap();
        json!({
            "messages": session["messages"].as_array().map(|m| m.iter().map(|m| m["content"].clone()).collect::<Vec<_>>()),
            "user": session["user_id"],
            "memory": memory["text"],
            "lesson": episode["lesson"],
            "key": victim_key["state"],
        })
    }
}

/// A request with a JSON body (none for `Null`) and an optional key.
fn json_request(method: Method, path: &str, body: &Value, key: Option<&str>) -> Request<Body> {
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(key) = key {
        builder = builder.header(header::AUTHORIZATION, format!("Bearer {key}"));
    }
    let body = if body.is_null() {
        Body::empty()
    } else {
        Body::from(body.to_string())
    };
    builder.body(body).unwrap()
}

/// The operations the router serves, probed without a key (so nothing runs): whatever is not
/// refused as an unknown route or a wrong method.
async fn served(fixture: &Fixture) -> Vec<(String, String)> {
    let mut served = Vec::new();
    for path in router_paths(&fixture.router) {
        for method in [
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
        ] {
            let request = Request::builder()
                .method(method.clone())
                .uri(concrete(&path))
                .body(Body::empty())
                .unwrap();
            let answer = fixture.send(request).await;
            let unrouted = answer.status == StatusCode::METHOD_NOT_ALLOWED
                || (answer.status == StatusCode::NOT_FOUND
                    && answer.json()["error"]["code"] == "route_not_found");
            if !unrouted {
                served.push((method.to_string(), path.clone()));
            }
        }
    }
    served
}

#[tokio::test]
async fn every_route_answers_every_kind_of_key_exactly() {
    let world = World::new().await;
    let before = world.victim().await;
    assert_eq!(
        before,
        json!({
            "messages": [format!("{CANARY}: my order 4711 is late")],
            "user": "alice",
            "memory": format!("{CANARY}: alice prefers tea"),
            "lesson": format!("{CANARY}: ask for the receipt"),
            "key": "active",
        })
    );

    let served = served(&world.fixture).await;
    assert!(
        served.len() > 30,
        "the router's routes were not found: {served:?}"
    );
    let missing: Vec<_> = served
        .iter()
        .filter(|(method, path)| {
            !TABLE
                .iter()
                .any(|row| row.method == method && row.path == path)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "routes missing from the authorization table in src/tests/auth.rs (decide who may \
         call them): {missing:?}"
    );
    let stale: Vec<_> = TABLE
        .iter()
        .filter(|row| {
            !served
                .iter()
                .any(|(method, path)| row.method == method && row.path == path)
        })
        .map(|row| (row.method, row.path))
        .collect();
    assert!(stale.is_empty(), "rows for routes not served: {stale:?}");

    let mut failures = Vec::new();
    for row in TABLE {
        for case in CASES {
            let Some((status, code)) = expected(row, case) else {
                continue;
            };
            let answer: Answer = world.fixture.send(world.request(row, case)).await;
            let at = format!("{} {}{} with {case:?}", row.method, row.path, row.query);
            if answer.status.as_u16() != status {
                failures.push(format!(
                    "{at}: expected {status}, got {} {}",
                    answer.status,
                    answer.text()
                ));
                continue;
            }
            if let Some(code) = code {
                let body = answer.json();
                if body["error"]["code"] != code {
                    failures.push(format!("{at}: expected code {code}, got {body}"));
                }
            }
            if status == 401 {
                let challenge = answer.header("www-authenticate").unwrap_or_default();
                if !challenge.starts_with("Bearer") {
                    failures.push(format!("{at}: WWW-Authenticate is {challenge:?}"));
                }
            }
            // The operator's backup holds every tenant's data: that is what it is for.
            let whole_store = row.access == Operator && case == Case::Operator;
            if row.access != Access::Public && !whole_store && answer.text().contains(CANARY) {
                failures.push(format!("{at}: the answer shows the victim's data"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} wrong answers:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(
        world.victim().await,
        before,
        "the attempts changed the victim's data"
    );
}

/// The owner's own key reaches what the others may not, and the tenant header may repeat the
/// key's tenant.
#[tokio::test]
async fn a_user_key_reaches_its_own_user_and_nothing_else() {
    let world = World::new().await;
    let alice = Some(world.keys.alice.as_str());
    let send = |method: Method, path: &str, body: Value| {
        world.fixture.send(json_request(method, path, &body, alice))
    };
    let session = send(Method::GET, &format!("/v1/sessions/{SESSION}"), Value::Null).await;
    assert_eq!(session.status, StatusCode::OK, "{}", session.text());
    let listing = send(Method::GET, "/v1/sessions", Value::Null).await.json();
    assert_eq!(listing["total_elements"], 1, "{listing}");
    let recalled = send(
        Method::POST,
        "/v1/recall",
        json!({ "query": "order", "user_id": "alice" }),
    )
    .await;
    assert_eq!(recalled.status, StatusCode::OK, "{}", recalled.text());
    assert_eq!(
        send(
            Method::POST,
            "/v1/recall",
            json!({ "query": "order", "user_id": "mallory" }),
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );
    // Creating: for alice yes, for someone else no.
    let created = send(
        Method::POST,
        "/v1/sessions/alice-2/messages",
        json!({ "user_id": "alice", "agent_id": "support", "role": "user", "content": "hi" }),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text());
    send(
        Method::POST,
        "/v1/sessions/mallory-2/messages",
        json!({ "user_id": "mallory", "agent_id": "support", "role": "user", "content": "hi" }),
    )
    .await
    .assert_error(StatusCode::FORBIDDEN, "forbidden");
    // The service key sees both of alice's sessions; mallory's key neither.
    let all = world
        .fixture
        .send(json_request(
            Method::GET,
            "/v1/sessions?user_id=alice",
            &Value::Null,
            Some(&world.keys.service),
        ))
        .await
        .json();
    assert_eq!(all["total_elements"], 2, "{all}");
    let none = world
        .fixture
        .send(json_request(
            Method::GET,
            "/v1/sessions",
            &Value::Null,
            Some(&world.keys.mallory),
        ))
        .await
        .json();
    assert_eq!(none["total_elements"], 0, "{none}");

    let mut repeated = json_request(
        Method::GET,
        &format!("/v1/sessions/{SESSION}"),
        &Value::Null,
        alice,
    );
    repeated
        .headers_mut()
        .insert("x-memlayer-tenant", "default".parse().unwrap());
    assert_eq!(world.fixture.send(repeated).await.status, StatusCode::OK);

    // Alice may erase herself, and then her session is gone.
    let erased = send(Method::DELETE, "/v1/users/alice", Value::Null).await;
    assert_eq!(erased.status, StatusCode::OK, "{}", erased.text());
    assert_eq!(erased.json()["counts"]["sessions"], 2);
}

/// Keys over HTTP: created with the secret shown once, listed without it, revoked for good.
#[tokio::test]
async fn keys_are_created_listed_and_revoked_over_http() {
    let fixture = Fixture::new();
    let created = fixture
        .send(json_request(
            Method::POST,
            "/v1/keys",
            &json!({ "role": "user", "user_id": "alice", "name": "alice's app", "expires_in_days": 30 }),
            Some(ADMIN_KEY),
        ))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text());
    let body = created.json();
    let secret = body["key"].as_str().unwrap().to_owned();
    let prefix = body["prefix"].as_str().unwrap().to_owned();
    assert!(secret.starts_with(&format!("mlk_{prefix}_")), "{body}");
    assert_eq!(
        (
            &body["tenant"],
            &body["role"],
            &body["user_id"],
            &body["state"]
        ),
        (
            &json!("default"),
            &json!("user"),
            &json!("alice"),
            &json!("active")
        )
    );
    assert!(body["expires_at"].is_string());

    let listed = fixture
        .send(json_request(
            Method::GET,
            "/v1/keys",
            &Value::Null,
            Some(ADMIN_KEY),
        ))
        .await;
    let text = listed.text();
    assert!(!text.contains(&secret[prefix.len() + 5..]), "{text}");
    let prefixes: Vec<_> = listed.json()["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|key| key["prefix"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(prefixes, ["config".to_owned(), prefix.clone()]);

    let works = fixture
        .send(json_request(
            Method::GET,
            "/v1/sessions",
            &Value::Null,
            Some(&secret),
        ))
        .await;
    assert_eq!(works.status, StatusCode::OK);

    for (body, status, code) in [
        (json!({ "role": "user" }), 422, "invalid_value"),
        (
            json!({ "role": "service", "user_id": "alice" }),
            422,
            "invalid_value",
        ),
        (
            json!({ "role": "service", "expires_in_days": 0 }),
            422,
            "invalid_value",
        ),
        (json!({ "role": "root" }), 400, "invalid_body"),
        // An operator key is made on the data directory only, never by a tenant's key.
        (json!({ "role": "operator" }), 403, "forbidden"),
    ] {
        fixture
            .send(json_request(
                Method::POST,
                "/v1/keys",
                &body,
                Some(ADMIN_KEY),
            ))
            .await
            .assert_error(StatusCode::from_u16(status).unwrap(), code);
    }

    let revoked = fixture
        .send(json_request(
            Method::DELETE,
            &format!("/v1/keys/{prefix}"),
            &Value::Null,
            Some(ADMIN_KEY),
        ))
        .await;
    assert_eq!(revoked.status, StatusCode::OK);
    assert_eq!(revoked.json()["state"], "revoked");
    let refused = fixture
        .send(json_request(
            Method::GET,
            "/v1/sessions",
            &Value::Null,
            Some(&secret),
        ))
        .await;
    refused.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    assert!(refused.text().contains("revoked"));
    fixture
        .send(json_request(
            Method::DELETE,
            "/v1/keys/nope",
            &Value::Null,
            Some(ADMIN_KEY),
        ))
        .await
        .assert_error(StatusCode::NOT_FOUND, "key_not_found");
}

/// The document requires the bearer key on every `/v1` operation and on nothing else, and
/// names exactly the roles [`TABLE`] gives each operation (which
/// `every_route_answers_every_kind_of_key_exactly` checks against the server).
#[test]
fn the_document_names_the_roles_each_operation_takes() {
    let spec: Value = serde_json::from_str(&crate::openapi::OPENAPI_JSON).unwrap();
    assert_eq!(
        spec["components"]["securitySchemes"]["bearerAuth"]["scheme"],
        "bearer"
    );
    let mut documented = 0;
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let row = TABLE
                .iter()
                .find(|row| row.path == path && row.method.eq_ignore_ascii_case(method))
                .unwrap_or_else(|| panic!("{method} {path} is not in the access table"));
            let roles: &[&str] = match row.access {
                Access::Public => {
                    assert!(operation.get("security").is_none(), "{method} {path}");
                    continue;
                }
                Admin => &["tenant_admin"],
                Service => &["tenant_admin", "service"],
                Owner => &["tenant_admin", "service", "user"],
                AdminOrSelf => &["tenant_admin", "user"],
                Operator => &["operator"],
            };
            assert_eq!(
                operation["security"],
                json!([{ "bearerAuth": roles }]),
                "{method} {path}"
            );
            documented += 1;
        }
    }
    assert!(documented > 40, "{documented}");
}
