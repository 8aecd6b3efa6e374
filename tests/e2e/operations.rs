//! Operating the server through real HTTP: `/openapi.json` describes what the server really
//! accepts and answers (every request body sent and every answer received here is checked
//! against the document's schemas), `/docs` renders it without the network, `/metrics`
//! counts requests by route template, and request ids come back.

use std::time::{Duration, Instant};

use memlayer_tests::{TestServer, json};
use reqwest::Method;
use serde_json::Value;

/// Every mismatch of `value` with `schema`, whose `$ref`s point into the document's
/// components, as `path: reason` (JSON Schema 2020-12, as OpenAPI 3.1 uses it; `format` and
/// the content keywords are annotations).
fn mismatches(spec: &Value, schema: &Value, value: &Value) -> Vec<String> {
    let mut root = schema.clone();
    root["components"] = spec["components"].clone();
    let validator = jsonschema::draft202012::new(&root)
        .unwrap_or_else(|err| panic!("the document's schema {schema} is not valid: {err}"));
    validator
        .iter_errors(value)
        .map(|error| format!("{}: {error}", error.instance_path()))
        .collect()
}

#[track_caller]
fn assert_valid(spec: &Value, schema: &Value, value: &Value, what: &str) {
    let errors = mismatches(spec, schema, value);
    assert!(
        errors.is_empty(),
        "{what} does not match the document: {errors:#?}"
    );
}

/// The running server and its own description of itself.
struct Documented {
    server: TestServer,
    spec: Value,
}

impl Documented {
    fn start() -> Self {
        let server = TestServer::start();
        let (status, spec) = server.get("/openapi.json");
        assert_eq!(status, 200);
        Self { server, spec }
    }

    /// Sends `body` (if any) to `path`, an instance of the documented `template`, after
    /// checking the body against the documented request schema; then checks the answer
    /// against the response the document gives for its status (or the `5XX` range).
    #[track_caller]
    fn call(
        &self,
        method: Method,
        template: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        self.exchange(method, template, path, body, true)
    }

    /// [`Documented::call`] with a body the document rightly refuses: only the answer is
    /// checked.
    #[track_caller]
    fn call_invalid(
        &self,
        method: Method,
        template: &str,
        path: &str,
        body: Value,
    ) -> (u16, Value) {
        self.exchange(method, template, path, Some(body), false)
    }

    #[track_caller]
    fn exchange(
        &self,
        method: Method,
        template: &str,
        path: &str,
        body: Option<Value>,
        check_request: bool,
    ) -> (u16, Value) {
        let what = format!("{method} {path}");
        let operation = &self.spec["paths"][template][method.as_str().to_lowercase()];
        assert!(
            operation.is_object(),
            "{method} {template} is not documented"
        );
        let mut request = self.server.request(method.clone(), path);
        if let Some(body) = body {
            let schema = &operation["requestBody"]["content"]["application/json"]["schema"];
            assert!(schema.is_object(), "{what}: no documented request body");
            if check_request {
                assert_valid(
                    &self.spec,
                    schema,
                    &body,
                    &format!("the request body of {what}"),
                );
            }
            request = request.json(&body);
        }
        let (status, answer) = memlayer_tests::send(request);
        let responses = &operation["responses"];
        let range = format!("{}XX", status / 100);
        let documented = [status.to_string(), range]
            .into_iter()
            .map(|key| &responses[key])
            .find(|response| response.is_object())
            .unwrap_or_else(|| panic!("{what} answered {status}, which is not documented"));
        match &documented["content"]["application/json"]["schema"] {
            Value::Null => assert_eq!(answer, Value::Null, "{what}: undocumented body"),
            schema => assert_valid(&self.spec, schema, &answer, &format!("{what} ({status})")),
        }
        (status, answer)
    }
}

/// The checker above finds what it must, or the test below would prove nothing.
#[test]
fn the_schema_checker_catches_mismatches() {
    let spec = serde_json::to_value(memlayer_server::openapi()).unwrap();
    let schema = |name: &str| json!({ "$ref": format!("#/components/schemas/{name}") });
    let errors = |name: &str, value: Value| mismatches(&spec, &schema(name), &value);
    assert!(errors("Role", json!("user")).is_empty());
    assert_eq!(errors("Role", json!("robot")).len(), 1);
    let create = json!({ "user_id": "u", "agent_id": "a" });
    assert!(errors("CreateSessionRequest", create).is_empty());
    assert_eq!(
        errors("CreateSessionRequest", json!({ "user_id": "u" })).len(),
        1
    );
    let extra = json!({ "user_id": "u", "agent_id": "a", "colour": "red" });
    assert_eq!(errors("CreateSessionRequest", extra).len(), 1);
    assert!(!errors("Rendered", json!({ "system": "s" })).is_empty());
    assert!(errors("Rendered", json!({ "system": "s", "messages": [] })).is_empty());
    assert!(!errors("Superseded", json!(["old", "one"])).is_empty());
    assert!(errors("Superseded", json!(["old", 1])).is_empty());
    assert!(!errors("ErrorBody", json!({ "error": { "code": "x" } })).is_empty());
    assert!(!errors("SessionWithMessages", json!({ "messages": [] })).is_empty());
    let settings = json!({ "max_turns": 0 });
    assert!(!errors("SettingsDocument", settings).is_empty());
}

#[test]
fn the_openapi_document_describes_what_the_server_really_does() {
    let api = Documented::start();
    assert_eq!(api.spec["openapi"], "3.1.0");
    let post = |template: &str, path: &str, body: Value| {
        api.call(Method::POST, template, path, Some(body))
    };
    let get = |template: &str, path: &str| api.call(Method::GET, template, path, None);

    // Sessions and messages.
    let created = post(
        "/v1/sessions",
        "/v1/sessions",
        json!({ "session_id": "ops-1", "user_id": "dana", "agent_id": "support", "metadata": { "plan": "pro" } }),
    );
    assert_eq!(created.0, 201);
    let conflict = post(
        "/v1/sessions",
        "/v1/sessions",
        json!({ "session_id": "ops-1", "user_id": "dana", "agent_id": "support" }),
    );
    assert_eq!(conflict.0, 409);
    let messages = "/v1/sessions/{session_id}/messages";
    let turns = [
        (
            "user",
            "Hi, my name is Dana Whitfield and my email is dana@example.com.",
        ),
        ("assistant", "Hello Dana, how can I help?"),
        (
            "user",
            "My order 4711 has not arrived; the parcel seems lost.",
        ),
        (
            "assistant",
            "Sorry about the delayed parcel. I have opened a claim.",
        ),
    ];
    for (role, content) in turns {
        let body = json!({ "role": role, "content": content, "metadata": { "source": "e2e" } });
        assert_eq!(post(messages, "/v1/sessions/ops-1/messages", body).0, 201);
    }
    let batch = json!({
        "user_id": "dana", "agent_id": "support", "idempotency_key": "batch-1",
        "messages": [
            { "role": "system", "content": "You are a support agent." },
            { "role": "user", "content": "Is there news about my refund?", "token_count": 9,
              "timestamp": "2026-05-06T10:00:00Z" },
        ],
    });
    // The key as a body field: the second spelling the document leaves out (it names it in
    // the `Idempotency-Key` header's description), so only the answers are checked.
    let post_keyed =
        |body: Value| api.call_invalid(Method::POST, messages, "/v1/sessions/ops-2/messages", body);
    assert_eq!(post_keyed(batch.clone()).0, 201);
    let replay = post_keyed(batch);
    assert_eq!((replay.0, &replay.1["replayed"]), (200, &json!(true)));
    // A single message without content: the document rules it out, and the server refuses it.
    let incomplete = json!({ "role": "user" });
    assert_eq!(
        api.call_invalid(
            Method::POST,
            messages,
            "/v1/sessions/ops-1/messages",
            incomplete
        )
        .0,
        422
    );

    get(
        "/v1/sessions",
        "/v1/sessions?user_id=dana&page=0&page_size=1",
    );
    get("/v1/sessions/{session_id}", "/v1/sessions/ops-1");
    assert_eq!(get("/v1/sessions/{session_id}", "/v1/sessions/nope").0, 404);
    let page = get(messages, "/v1/sessions/ops-1/messages?from=0&limit=2");
    assert_eq!(page.1["next_from"], 2);
    let search = get(
        "/v1/sessions/{session_id}/search",
        "/v1/sessions/ops-1/search?q=parcel&limit=5",
    );
    assert!(!search.1["hits"].as_array().unwrap().is_empty());

    // Runs.
    let runs = "/v1/sessions/{session_id}/runs";
    let run = json!({ "status": "COMPLETED", "content": "Claim opened.", "tool_calls": [{ "name": "open_claim" }] });
    assert_eq!(post(runs, "/v1/sessions/ops-1/runs", run).0, 201);
    let failed = json!({ "run_id": "r-2", "status": "FAILED", "error": "upstream timeout" });
    assert_eq!(post(runs, "/v1/sessions/ops-1/runs", failed).0, 201);
    assert_eq!(
        get(runs, "/v1/sessions/ops-1/runs")
            .1
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // Context, in every format, and entity memory.
    let context = "/v1/sessions/{session_id}/context";
    for format in ["openai", "anthropic", "text"] {
        let body = json!({
            "query": "where is my parcel?",
            "format": format,
            "settings": { "strategy": "combined", "context_window": 4096, "max_turns": 1 },
        });
        let (status, answer) = post(context, "/v1/sessions/ops-1/context", body);
        assert_eq!(status, 200, "{answer}");
    }
    let summarised = json!({ "settings": { "strategy": "full_history", "context_window": 256, "overflow": "summarize" } });
    assert_eq!(
        post(context, "/v1/sessions/ops-1/context", summarised).0,
        200
    );
    let invalid = json!({ "settings": { "recall_k": 99 } });
    let refused = api.call_invalid(Method::POST, context, "/v1/sessions/ops-1/context", invalid);
    assert_eq!(refused.0, 422);
    let facts = get(
        "/v1/sessions/{session_id}/entities",
        "/v1/sessions/ops-1/entities",
    );
    assert!(
        facts.1["facts"]
            .as_object()
            .is_some_and(|facts| !facts.is_empty()),
        "{}",
        facts.1
    );

    // Recall.
    let recall = post(
        "/v1/recall",
        "/v1/recall",
        json!({ "query": "lost package", "user_id": "dana", "agent_id": "support", "k": 3, "roles": ["user"] }),
    );
    assert!(
        !recall.1["hits"].as_array().unwrap().is_empty(),
        "{}",
        recall.1
    );

    // Settings of the tenant and of an agent.
    let put =
        |template: &str, path: &str, body: Value| api.call(Method::PUT, template, path, Some(body));
    let delete = |template: &str, path: &str| api.call(Method::DELETE, template, path, None);
    put(
        "/v1/settings",
        "/v1/settings",
        json!({ "max_turns": 3, "redact_pii": false }),
    );
    let refused = api.call_invalid(
        Method::PUT,
        "/v1/settings",
        "/v1/settings",
        json!({ "max_turns": 0 }),
    );
    assert_eq!(refused.0, 422);
    get("/v1/settings", "/v1/settings");
    let agent = "/v1/agents/{agent_id}/settings";
    put(
        agent,
        "/v1/agents/support/settings",
        json!({ "strategy": "history_depth" }),
    );
    get(agent, "/v1/agents/support/settings");
    delete(agent, "/v1/agents/support/settings");
    delete("/v1/settings", "/v1/settings");

    // Episodes, the lessons of a task type, and an agent's memory configuration.
    let episodes = "/v1/users/{user_id}/episodes";
    let episode = json!({
        "task_type": "refund", "description": "A lost parcel.", "outcome": "partial",
        "reflection": "The claim took two days.", "lesson": "Open the claim in the first answer.",
        "standing": false, "agent_id": "support", "source_session_id": "ops-1",
    });
    let (status, recorded) = post(episodes, "/v1/users/dana/episodes", episode);
    assert_eq!(status, 201, "{recorded}");
    get(
        episodes,
        "/v1/users/dana/episodes?agent_id=support&task_type=refund",
    );
    let lessons = get(
        "/v1/users/{user_id}/lessons",
        "/v1/users/dana/lessons?task_type=refund&agent_id=support",
    );
    assert!(lessons.1["text"].is_string(), "{}", lessons.1);
    let lessoned = json!({ "query": "parcel?", "settings": { "task_type": "refund" } });
    let (status, answer) = post(context, "/v1/sessions/ops-1/context", lessoned);
    assert_eq!(
        (status, &answer["report"]["lessons"]),
        (200, &json!([recorded["episode_id"]]))
    );
    let one = "/v1/episodes/{episode_id}";
    let path = format!("/v1/episodes/{}", recorded["episode_id"]);
    get(one, &path);
    let config = "/v1/agents/{agent_id}/memory-config";
    let document = json!({
        "session_memory": true,
        "types": [
            { "id": "working_memory", "enabled": true,
              "config": { "max_tokens": 4000, "compaction_strategy": "summarize" } },
            { "id": "long_term", "enabled": true, "config": { "max_memories": 50 } },
            { "id": "episodic", "enabled": false },
        ],
    });
    put(config, "/v1/agents/support/memory-config", document);
    get(config, "/v1/agents/support/memory-config");
    delete(agent, "/v1/agents/support/settings");
    assert_eq!(delete(one, &path).0, 200);

    // API keys: created with the secret this once, listed without it, revoked.
    let (status, created) = post(
        "/v1/keys",
        "/v1/keys",
        json!({ "role": "user", "user_id": "dana", "name": "dana's app", "expires_in_days": 7 }),
    );
    assert_eq!(status, 201, "{created}");
    get("/v1/keys", "/v1/keys");
    let prefix = created["prefix"].as_str().unwrap();
    let (status, revoked) = delete("/v1/keys/{prefix}", &format!("/v1/keys/{prefix}"));
    assert_eq!((status, &revoked["state"]), (200, &json!("revoked")));

    // Agent runs: refused as documented when no model is configured (the runs module
    // drives them against a fake model).
    let runs = "/v1/agents/{agent_id}/runs";
    let body = json!({ "user_id": "dana", "session_id": "ops-1", "message": "Hello?" });
    assert_eq!(post(runs, "/v1/agents/support/runs", body).0, 503);
    let empty = json!({ "user_id": "dana", "message": "" });
    assert_eq!(
        api.call_invalid(Method::POST, runs, "/v1/agents/support/runs", empty)
            .0,
        422
    );

    // The OpenAI-compatible endpoint: the conversation's headers are required (the openai
    // module drives it against a fake model).
    let chat = json!({ "model": "gpt-4o", "messages": [{ "role": "user", "content": "Hello?" }] });
    let chat = post(
        "/v1/openai/chat/completions",
        "/v1/openai/chat/completions",
        chat,
    );
    assert_eq!(chat.0, 400);

    // Clear, probes, deletion.
    api.call(
        Method::POST,
        "/v1/sessions/{session_id}/clear",
        "/v1/sessions/ops-1/clear",
        None,
    );
    get("/healthz", "/healthz");
    get("/readyz", "/readyz");
    assert_eq!(
        delete("/v1/sessions/{session_id}", "/v1/sessions/ops-2").0,
        204
    );
}

#[test]
fn the_docs_page_and_the_metrics_are_served() {
    let server = TestServer::start();
    let docs = server.request(Method::GET, "/docs").send().unwrap();
    assert_eq!(docs.status(), 200);
    assert_eq!(docs.headers()["content-type"], "text/html; charset=utf-8");
    assert!(docs.headers().contains_key("content-security-policy"));
    let page = docs.text().unwrap();
    assert!(page.contains("/openapi.json") && !page.contains("https://"));

    let say = json!({ "user_id": "u", "agent_id": "a", "role": "user", "content": "The parcel 4711 is lost." });
    for session in ["m-1", "m-2"] {
        assert_eq!(
            server
                .post(&format!("/v1/sessions/{session}/messages"), &say)
                .0,
            201
        );
    }
    // Embedding runs beside the requests: wait until both messages have their vectors.
    let scrape = || {
        let answer = server.request(Method::GET, "/metrics").send().unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(
            answer.headers()["content-type"],
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        );
        answer.text().unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut text = scrape();
    while !text.contains("memlayer_index_vectors 2\n") {
        assert!(
            Instant::now() < deadline,
            "the messages were not embedded:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
        text = scrape();
    }
    let (status, _) = server.post("/v1/recall", &json!({ "query": "parcel", "user_id": "u" }));
    assert_eq!(status, 200);
    // Loads user u's long-term memory partition (empty) into memory.
    let (status, _) = server.post("/v1/users/u/memories/search", &json!({ "query": "parcel" }));
    assert_eq!(status, 200);
    let (status, _) = server.delete("/v1/sessions/m-2");
    assert_eq!(status, 204);
    let text = scrape();
    for line in [
        "memlayer_http_requests_total{route=\"/v1/sessions/{session_id}/messages\",method=\"POST\",status=\"2xx\"} 2\n",
        "memlayer_http_requests_total{route=\"/docs\",method=\"GET\",status=\"2xx\"} 1\n",
        "memlayer_http_request_duration_seconds_count{route=\"/v1/recall\",method=\"POST\"} 1\n",
        "memlayer_http_requests_in_flight 1\n",
        "memlayer_index_vectors 1\n",
        "memlayer_embeddings_pending 0\n",
        "memlayer_embed_queue_request_batches 0\n",
        "memlayer_embed_queue_background_batches 0\n",
        "memlayer_messages_appended_total 2\n",
        "memlayer_erasures_finished_total 1\n",
        "memlayer_erasure_jobs_pending 0\n",
        "memlayer_index_graph_pending 0\n",
        "memlayer_index_keywords_pending 0\n",
        "memlayer_memory_graphs_pending 0\n",
        "memlayer_memory_resident_memories 0\n",
        "memlayer_nodes_live 1\n",
        "memlayer_memory_resident_partitions 1\n",
        "memlayer_memory_resident_budget 200000\n",
        "memlayer_memory_partition_loads_total 1\n",
        "memlayer_memory_partition_evictions_total 0\n",
    ] {
        assert!(text.contains(line), "no {line:?} in\n{text}");
    }
    let commits = text
        .lines()
        .find_map(|line| line.strip_prefix("memlayer_store_commits_total "))
        .expect("the commit counter");
    assert!(commits.parse::<u64>().unwrap() >= 2, "{commits}");
    assert!(!text.contains("m-1"), "raw paths stay out of the labels");
}

#[test]
fn request_ids_come_back() {
    let server = TestServer::start();
    let given = server
        .request(Method::GET, "/healthz")
        .header("x-request-id", "trace-me-7")
        .send()
        .unwrap();
    assert_eq!(given.headers()["x-request-id"], "trace-me-7");
    let generated = server
        .request(Method::GET, "/v1/sessions/none")
        .send()
        .unwrap();
    assert_eq!(generated.status(), 404);
    assert_eq!(generated.headers()["x-request-id"].len(), 36);
}

/// The metric labels come from fixed sets: HTTP allows any token as a method, and an
/// anonymous client inventing one per request must not add a series each time (the registry
/// keeps every series for the life of the process).
#[test]
fn invented_methods_share_one_metric_label() {
    let server = TestServer::start();
    let series = || {
        let text = server
            .anonymous(Method::GET, "/metrics")
            .send()
            .unwrap()
            .text()
            .unwrap();
        let requests = text
            .lines()
            .filter(|line| line.starts_with("memlayer_http_requests_total{"))
            .count();
        (requests, text)
    };
    let (before, _) = series();
    for n in 0..40 {
        let method = Method::from_bytes(format!("PROBE{n}X").as_bytes()).unwrap();
        let path = if n % 2 == 0 {
            "/v1/sessions"
        } else {
            "/no/such/route"
        };
        let status = server.anonymous(method, path).send().unwrap().status();
        assert!(status.is_client_error(), "{status}");
    }
    let (after, text) = series();
    assert!(
        !text.contains("PROBE"),
        "invented methods became labels:\n{text}"
    );
    assert!(
        text.contains("method=\"other\""),
        "they count under `other`:\n{text}"
    );
    // At most one series per route template and status class for all of them together (and
    // the scrape's own).
    assert!(
        after <= before + 4,
        "{before} series before, {after} after:\n{text}"
    );
}

/// The pages cannot be framed by another site (clickjacking the admin page into purging),
/// send no referrer, and no answer may be sniffed into another content type.
#[test]
fn pages_refuse_framing_and_every_answer_forbids_sniffing() {
    let server = TestServer::start();
    for page in ["/admin", "/docs"] {
        let answer = server.anonymous(Method::GET, page).send().unwrap();
        assert_eq!(answer.status(), 200);
        let headers = answer.headers();
        let policy = headers["content-security-policy"].to_str().unwrap();
        assert!(
            policy.contains("frame-ancestors 'none'"),
            "{page}: {policy}"
        );
        assert_eq!(headers["x-frame-options"], "DENY", "{page}");
        assert_eq!(headers["referrer-policy"], "no-referrer", "{page}");
        assert_eq!(headers["x-content-type-options"], "nosniff", "{page}");
    }
    for (method, path) in [
        (Method::GET, "/healthz"),
        (Method::GET, "/metrics"),
        (Method::GET, "/openapi.json"),
        (Method::GET, "/v1/sessions"),
        (Method::GET, "/v1/sessions/none"),
        (Method::GET, "/no/such/route"),
        (Method::DELETE, "/healthz"),
    ] {
        let answer = server.request(method.clone(), path).send().unwrap();
        assert_eq!(
            answer
                .headers()
                .get("x-content-type-options")
                .map(|v| v.to_str().unwrap()),
            Some("nosniff"),
            "{method} {path} answered {}",
            answer.status()
        );
    }
}
