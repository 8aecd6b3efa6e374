//! Support for memlayer's end-to-end tests: [`TestServer`] runs the real HTTP server
//! (`memlayer_server::serve`) over a real redb file in a fresh temporary directory, on an
//! ephemeral 127.0.0.1 port and on a tokio runtime of its own, and drives it with a blocking
//! HTTP client whose helpers answer `(status, JSON body)`, each error answer checked against
//! the server's OpenAPI document ([`assert_documented`]). Every server accepts [`ADMIN_KEY`]
//! (a `tenant_admin` key of tenant `default`), which the client sends by default;
//! [`TestServer::create_key`] and [`TestServer::tenant_key`] make others. [`TestServer::restart`] stops the
//! server gracefully and reopens the same file, which is how tests prove durability. Tests stay
//! synchronous; concurrency comes from plain threads sharing one client.
//!
//! Each server owns its runtime rather than borrowing the test's: shutting that runtime down
//! after a stop guarantees every task (and so every clone of the `Store`) is gone, so the redb
//! file can be reopened in the same process without racing the last connection task.
//!
//! With `MEMLAYER_E2E_BACKEND=postgres` ([`on_postgres`]) every server keeps its records in a
//! PostgreSQL database of its own instead (`memlayer_postgres::test_cluster`: a throwaway
//! cluster per test process, or `MEMLAYER_TEST_DATABASE_URL`), through
//! `Store::served_by` as `memlayer serve --database-url` does; a restart reopens the same
//! database. `cargo xtask test` runs the suite both ways.

#![deny(missing_docs)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use memlayer_embed::Embedder;
use memlayer_index::{Recall, RecallOptions};
use memlayer_server::{AppState, ServerConfig};
use memlayer_store::{KeyRole, NewKey, Store};
use reqwest::Method;
use reqwest::blocking::{Client, RequestBuilder};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde_json::Value;
use tempfile::TempDir;
use tokio::sync::oneshot;

pub use serde_json::json;

/// How long a graceful stop may take before the test fails.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long any single HTTP request may take before the test fails.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The admin key every test server is configured with (`admin_key`): a `tenant_admin` key of
/// tenant `default`, sent by [`TestServer::client`] unless a request sets its own.
pub const ADMIN_KEY: &str = "e2e-admin-key-0123456789abcdef0123456789abcdef";

/// `Authorization` header value for `key`.
pub fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

/// The variable that selects the backend the servers keep their records in.
pub const BACKEND_VARIABLE: &str = "MEMLAYER_E2E_BACKEND";

/// Whether this run's servers keep their records in PostgreSQL ([`BACKEND_VARIABLE`] is
/// `postgres`), not in a redb file. Tests of what only the file has (its bytes, its disk)
/// check the database's counterpart instead, or say why there is none.
pub fn on_postgres() -> bool {
    match std::env::var(BACKEND_VARIABLE) {
        Ok(value) if value == "postgres" => true,
        Ok(value) if value == "redb" || value.is_empty() => false,
        Ok(other) => panic!("{BACKEND_VARIABLE} is redb or postgres, not {other:?}"),
        Err(_) => false,
    }
}

/// The real embedding model, loaded once per test binary and shared by every server (an
/// `Embedder` is a handle to worker threads that outlive any one runtime).
fn embedder() -> Embedder {
    memlayer_embed::test_support::shared_embedder()
}

/// The real server on 127.0.0.1 over a redb file in its own temporary directory.
pub struct TestServer {
    /// `None` between [`TestServer::stop`] and [`TestServer::restart`].
    running: Option<Running>,
    config: ServerConfig,
    client: Client,
    /// A client that sends no key.
    anonymous: Client,
    /// `tenant_admin` keys made by [`TestServer::tenant_key`], by tenant; they live in the
    /// store, so they survive restarts.
    tenant_keys: Mutex<HashMap<String, String>>,
    /// The records' database when [`on_postgres`]; kept across restarts.
    database: Option<memlayer_postgres::test_cluster::TestDatabase>,
    /// Removed on drop, after `Drop` has stopped the server.
    dir: TempDir,
}

/// A started server: its runtime, address and the means to stop it.
struct Running {
    runtime: tokio::runtime::Runtime,
    addr: SocketAddr,
    shutdown: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    /// The server's store, for creating keys of any tenant.
    store: Store,
}

/// The configuration of [`TestServer::start`]: the defaults without the per-key rate limit,
/// since tests send thousands of requests with one key as fast as they can. Tests of the
/// limit, and of anything else on the very defaults, use `ServerConfig::default()`.
pub fn config() -> ServerConfig {
    ServerConfig {
        rate_limit: None,
        ..ServerConfig::default()
    }
}

impl TestServer {
    /// Starts a server with [`config`] on a new, empty store.
    pub fn start() -> Self {
        Self::with_config(config())
    }

    /// Starts a server with `config` on a new, empty store.
    pub fn with_config(config: ServerConfig) -> Self {
        let dir = tempfile::tempdir().expect("create a temporary data directory");
        Self::in_dir(config, dir)
    }

    /// Starts a server with [`config`] whose agent runs and chat completions are answered by
    /// `model`.
    pub fn with_model(model: memlayer_llm::LlmConfig) -> Self {
        let model = memlayer_llm::ChatClient::new(model).expect("a valid model config");
        Self::with_config(ServerConfig {
            agent_model: Some(model),
            ..config()
        })
    }

    /// Starts a server with `config` on a new, empty store in a new directory inside
    /// `parent` (a small file system, say).
    pub fn with_config_in(config: ServerConfig, parent: &std::path::Path) -> Self {
        let dir = tempfile::tempdir_in(parent).expect("create a data directory");
        Self::in_dir(config, dir)
    }

    /// Starts a server with [`config`] keeping its records in `database`, whatever
    /// [`on_postgres`] says (for tests of what only a database does: restarts).
    pub fn on_database(database: memlayer_postgres::test_cluster::TestDatabase) -> Self {
        let dir = tempfile::tempdir().expect("create a temporary data directory");
        Self::in_dir_on(config(), dir, Some(database))
    }

    fn in_dir(config: ServerConfig, dir: TempDir) -> Self {
        let database = on_postgres().then(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime to create the database")
                .block_on(memlayer_postgres::test_cluster::database())
                .expect("a test database")
        });
        Self::in_dir_on(config, dir, database)
    }

    fn in_dir_on(
        mut config: ServerConfig,
        dir: TempDir,
        database: Option<memlayer_postgres::test_cluster::TestDatabase>,
    ) -> Self {
        // The same across restarts, as `memlayer serve` keeps it in its data directory: a
        // restarted server resumes its own interrupted erasures at once.
        config
            .node_id
            .get_or_insert_with(|| dir.path().display().to_string());
        let mut authorization =
            HeaderValue::from_str(&bearer(ADMIN_KEY)).expect("the key is a header value");
        authorization.set_sensitive(true);
        let client = Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .default_headers(HeaderMap::from_iter([(AUTHORIZATION, authorization)]))
            .build()
            .expect("build the HTTP client");
        let anonymous = Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .expect("build the HTTP client");
        let mut server = Self {
            running: None,
            config,
            client,
            anonymous,
            tenant_keys: Mutex::new(HashMap::new()),
            database,
            dir,
        };
        server.running = Some(server.launch());
        server
    }

    fn launch(&self) -> Running {
        log_warnings();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("test-server")
            .enable_all()
            .build()
            .expect("start the server's runtime");
        let store = match &self.database {
            None => Store::open(self.store_path()).expect("open the store"),
            Some(database) => Store::served_by(std::sync::Arc::new(
                runtime
                    .block_on(database.store())
                    .expect("open the store in the test database"),
            )),
        };
        let options = RecallOptions::default()
            .with_snapshot(self.dir.path().join("vectors.idx"))
            .with_keywords_in_background();
        // In the runtime's context, as `memlayer serve` opens them: a store in PostgreSQL
        // answers the synchronous reads of the build through it.
        let recall = {
            let _runtime = runtime.enter();
            Recall::open(store.clone(), embedder(), options).expect("build the recall indexes")
        };
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("the listener has an address");
        runtime
            .block_on(store.keys().bootstrap_keys(Some(ADMIN_KEY)))
            .expect("configure the admin key");
        let (shutdown, signal) = oneshot::channel::<()>();
        let state = AppState::new(store.clone(), recall, self.config.clone())
            .expect("build the server state");
        let task = runtime.spawn(memlayer_server::serve(listener, state, async move {
            // A dropped sender (the test panicked) also stops the server.
            let _ = signal.await;
        }));
        Running {
            runtime,
            addr,
            shutdown,
            task,
            store,
        }
    }

    /// `http://127.0.0.1:PORT` of the running server; the port changes on restart.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.running().addr)
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.running().addr
    }

    /// The redb file the server stores into.
    pub fn store_path(&self) -> PathBuf {
        self.dir.path().join("memlayer.redb")
    }

    /// How many times `text` occurs in the bytes of the files the server keeps records in:
    /// the store file and the vector snapshot; on PostgreSQL the snapshot and every file of
    /// the cluster's data directory, the write-ahead log included.
    pub fn occurrences_in_files(&self, text: &str) -> usize {
        let mut files = vec![self.dir.path().join("vectors.idx")];
        match &self.database {
            None => files.push(self.store_path()),
            Some(database) => {
                // Rows written so far reach their table files: a WAL record can be split by
                // a WAL page header, so its text need not be whole in `pg_wal`.
                let dir = self.running().runtime.block_on(async {
                    let client = database
                        .connect()
                        .await
                        .expect("connect to the test database");
                    client
                        .batch_execute("CHECKPOINT")
                        .await
                        .expect("a checkpoint");
                    let row = client
                        .query_one("SELECT current_setting('data_directory')", &[])
                        .await
                        .expect("the data directory");
                    PathBuf::from(row.get::<_, String>(0))
                });
                files
                    .extend(memlayer_erasure::files_under(&dir).expect("list the cluster's files"));
            }
        }
        let files: Vec<&std::path::Path> = files.iter().map(PathBuf::as_path).collect();
        memlayer_erasure::scan_files(&files, text.as_bytes())
            .expect("read the server's files")
            .len()
    }

    /// Before the erasure of a session's content (its messages, runs, summary): no file holds
    /// `text` in plain, as both backends store it only sealed (the erasure destroys its key).
    pub fn assert_stored_sealed(&self, text: &str) {
        assert_eq!(
            self.occurrences_in_files(text),
            0,
            "{text:?} is stored sealed, never in plain"
        );
    }

    /// Before the erasure of a memory's text: the store file holds `text` (the control: the
    /// scan sees what is stored); on PostgreSQL no file of the cluster does, as content is
    /// stored only sealed.
    pub fn assert_stored(&self, text: &str) {
        let found = self.occurrences_in_files(text);
        if self.database.is_some() {
            assert_eq!(found, 0, "{text:?} is stored sealed, never in plain");
        } else {
            assert!(
                found > 0,
                "the control: the scan finds {text:?} while it is stored"
            );
        }
    }

    /// After an erasure's receipt: no file holds `text`, and on PostgreSQL every key an
    /// erasure destroyed is out of the cluster's files too (the receipt waited for the
    /// reclaim).
    pub fn assert_erased_from_files(&self, text: &str) {
        assert_eq!(
            self.occurrences_in_files(text),
            0,
            "{text:?} left in a file"
        );
        if let Some(keys) = self.keys_awaiting_reclaim() {
            assert_eq!(keys, 0, "destroyed keys still in the cluster's files");
        }
    }

    /// On PostgreSQL, how many data keys erasures destroyed whose bytes a reclaim has not yet
    /// removed from the cluster's files (0 once every erasure's receipt is out); `None` on the
    /// store file.
    pub fn keys_awaiting_reclaim(&self) -> Option<i64> {
        self.database.as_ref().map(|database| {
            self.query_one(database, "SELECT count(*) FROM destroyed_keys", |row| {
                row.get(0)
            })
        })
    }

    /// `read` of the one row `statement` answers on the test database, from a plain
    /// connection of the test's own.
    fn query_one<T>(
        &self,
        database: &memlayer_postgres::test_cluster::TestDatabase,
        statement: &str,
        read: impl FnOnce(&tokio_postgres::Row) -> T,
    ) -> T {
        self.running().runtime.block_on(async {
            let client = database
                .connect()
                .await
                .expect("connect to the test database");
            let row = client
                .query_one(statement, &[])
                .await
                .expect("the statement");
            read(&row)
        })
    }

    /// The shared HTTP client (cheap to clone, safe to use from many threads). It sends
    /// [`ADMIN_KEY`] unless a request sets its own `Authorization`.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Creates a key in the running server's store (any tenant, any role) and returns it.
    pub fn create_key(&self, tenant: &str, role: KeyRole, user_id: Option<&str>) -> String {
        let running = self.running();
        let new = NewKey {
            tenant: tenant.to_owned(),
            role,
            user_id: user_id.map(str::to_owned),
            name: None,
            expires_at: None,
        };
        running
            .runtime
            .block_on(running.store.keys().create_key(new))
            .expect("create a key")
            .secret
    }

    /// A `tenant_admin` key of `tenant` (made once per server, then reused).
    pub fn tenant_key(&self, tenant: &str) -> String {
        let mut keys = self
            .tenant_keys
            .lock()
            .expect("the key cache is not poisoned");
        if let Some(key) = keys.get(tenant) {
            return key.clone();
        }
        let key = self.create_key(tenant, KeyRole::TenantAdmin, None);
        keys.insert(tenant.to_owned(), key.clone());
        key
    }

    /// A request to `path` with `key` instead of the admin key.
    pub fn request_with_key(&self, key: &str, method: Method, path: &str) -> RequestBuilder {
        self.request(method, path)
            .header(AUTHORIZATION, bearer(key))
    }

    /// A request to `path` as `tenant`'s admin (with `tenant`'s key and tenant header).
    pub fn request_as(&self, tenant: &str, method: Method, path: &str) -> RequestBuilder {
        self.request_with_key(&self.tenant_key(tenant), method, path)
            .header("x-memlayer-tenant", tenant)
    }

    /// A request to `path` without any key.
    pub fn anonymous(&self, method: Method, path: &str) -> RequestBuilder {
        self.anonymous
            .request(method, format!("{}{path}", self.base_url()))
    }

    fn running(&self) -> &Running {
        self.running.as_ref().expect("the server is running")
    }

    /// Stops the server gracefully: it stops accepting connections, finishes in-flight
    /// requests and commits every queued write. Panics if that fails or takes too long.
    pub fn stop(&mut self) {
        let running = self.running.take().expect("the server is running");
        let Running {
            runtime,
            shutdown,
            task,
            ..
        } = running;
        let _ = shutdown.send(());
        let outcome = runtime.block_on(async { tokio::time::timeout(STOP_TIMEOUT, task).await });
        // Waits for blocking reads still holding a clone of the store.
        runtime.shutdown_timeout(STOP_TIMEOUT);
        match outcome {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(err))) => panic!("the server failed: {err}"),
            Ok(Err(err)) => panic!("the server task failed: {err}"),
            Err(_) => panic!("the server did not stop within {STOP_TIMEOUT:?}"),
        }
    }

    /// Waits until the server stops by itself, without being asked to, and answers how
    /// `memlayer_server::serve` ended (the binary exits non-zero on an error). Panics if it
    /// still runs after `timeout`.
    pub fn wait_for_stop(&mut self, timeout: Duration) -> std::io::Result<()> {
        let Running {
            runtime,
            shutdown,
            task,
            ..
        } = self.running.take().expect("the server is running");
        let outcome = runtime.block_on(async { tokio::time::timeout(timeout, task).await });
        // Only now: dropping the sender would ask the server to stop.
        drop(shutdown);
        runtime.shutdown_timeout(STOP_TIMEOUT);
        match outcome {
            Ok(Ok(result)) => result,
            Ok(Err(err)) => panic!("the server task failed: {err}"),
            Err(_) => panic!("the server did not stop by itself within {timeout:?}"),
        }
    }

    /// Stops the server and starts it again on the same store file (on a new port), with
    /// `change` made to its configuration.
    pub fn restart_with(&mut self, change: impl FnOnce(&mut ServerConfig)) {
        change(&mut self.config);
        self.restart();
    }

    /// Stops the server and starts it again on the same store file (on a new port).
    pub fn restart(&mut self) {
        if self.running.is_some() {
            self.stop();
        }
        self.running = Some(self.launch());
    }

    /// A request to `path` (which starts with `/`) on the running server.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.base_url()))
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> (u16, Value) {
        send(self.request(Method::GET, path))
    }

    /// `POST path` with a JSON body.
    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        send(self.request(Method::POST, path).json(body))
    }

    /// `PUT path` with a JSON body.
    pub fn put(&self, path: &str, body: &Value) -> (u16, Value) {
        send(self.request(Method::PUT, path).json(body))
    }

    /// `DELETE path`.
    pub fn delete(&self, path: &str) -> (u16, Value) {
        send(self.request(Method::DELETE, path))
    }

    /// Sends `request` bytes as they are over a new TCP connection and reads the answer.
    ///
    /// For requests an HTTP client refuses to send or normalises away, such as a literal `..`
    /// path segment. The request should say `Connection: close`.
    pub fn raw(&self, request: &[u8]) -> (u16, Value) {
        let mut stream = TcpStream::connect(self.addr()).expect("connect to the server");
        stream
            .set_read_timeout(Some(REQUEST_TIMEOUT))
            .expect("set a read timeout");
        stream.write_all(request).expect("send the raw request");
        let mut answer = Vec::new();
        stream
            .read_to_end(&mut answer)
            .expect("read the raw answer");
        let (status, body) = parse_raw_response(&answer);
        if status >= 400 {
            // The request line as sent: a URL would normalise away what the request is for.
            let line = String::from_utf8_lossy(request);
            let mut parts = line.split(' ');
            let (method, target) = (parts.next().unwrap_or_default(), parts.next());
            let method = Method::from_bytes(method.as_bytes()).expect("a raw request's method");
            let target = target.expect("a raw request's target");
            let path = target.split('?').next().unwrap_or_default();
            let base = reqwest::Url::parse(&self.base_url()).expect("the server's URL");
            check_documented(&method, &base, path, status, &body);
        }
        (status, body)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            // Stop without asserting: the test may already be panicking.
            let _ = running.shutdown.send(());
            let _ = running
                .runtime
                .block_on(async { tokio::time::timeout(STOP_TIMEOUT, running.task).await });
            running.runtime.shutdown_timeout(STOP_TIMEOUT);
        }
    }
}

/// Sends the servers' warnings and errors to the output of the test that started them,
/// which the harness shows when it fails (threads inherit a test's output capture): a
/// `503 storage_unavailable` names its cause only in the log.
fn log_warnings() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // Another subscriber already installed keeps its place.
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing_subscriber::filter::LevelFilter::WARN)
            .with_ansi(false)
            .with_test_writer()
            .try_init();
    });
}

/// Messages as (role, content) pairs; a message without text has an empty content.
fn pairs(messages: &Value) -> Vec<(String, String)> {
    messages
        .as_array()
        .expect("a list of messages")
        .iter()
        .map(|m| {
            (
                m["role"].as_str().expect("a role").to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// A (role, content) pair, as [`pairs`] gives them.
pub fn pair(role: &str, content: &str) -> (String, String) {
    (role.to_owned(), content.to_owned())
}

/// The session's stored messages as (role, content) pairs.
#[track_caller]
pub fn roles_and_contents(server: &TestServer, session: &str) -> Vec<(String, String)> {
    let (status, body) = server.get(&format!("/v1/sessions/{session}/messages"));
    assert_eq!(status, 200, "{body}");
    pairs(&body["messages"])
}

/// Every message the upstream was sent in its `index`th request, as (role, content) pairs.
pub fn sent(upstream: &memlayer_llm::FakeUpstream, index: usize) -> Vec<(String, String)> {
    pairs(&upstream.requests()[index].body["messages"])
}

/// A fake model endpoint on 127.0.0.1 (`memlayer_llm::FakeUpstream`), served by its own
/// runtime so that synchronous tests can use it; keep the runtime alive as long as the fake.
pub fn fake_upstream() -> (tokio::runtime::Runtime, memlayer_llm::FakeUpstream) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("start the fake upstream's runtime");
    let upstream = runtime.block_on(memlayer_llm::FakeUpstream::start());
    (runtime, upstream)
}

/// Sends `request` and answers its status and body: the JSON value, `Null` for an empty body,
/// or the text as a JSON string when the body is not JSON (so assertions show it).
///
/// An error answer is checked against the server's OpenAPI document (see [`assert_documented`]).
#[track_caller]
pub fn send(request: RequestBuilder) -> (u16, Value) {
    let (status, _, body) = send_with_headers(request);
    (status, body)
}

/// [`send`], with the answer's headers.
#[track_caller]
pub fn send_with_headers(request: RequestBuilder) -> (u16, HeaderMap, Value) {
    let (client, request) = request.build_split();
    let request = request.expect("the request is well formed");
    let (method, url) = (request.method().clone(), request.url().clone());
    let response = client
        .execute(request)
        .expect("the request reaches the server");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response.bytes().expect("read the response body");
    let body = body_value(&bytes);
    if status >= 400 {
        assert_documented(&method, &url, status, &body);
    }
    (status, headers, body)
}

/// The OpenAPI document of the test binary's servers, fetched from the first that answers an
/// error: they all run in this process, and serve the one document it builds once.
static DOCUMENT: Mutex<Option<std::sync::Arc<Value>>> = Mutex::new(None);

fn document(url: &reqwest::Url) -> std::sync::Arc<Value> {
    let mut cached = DOCUMENT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(document) = &*cached {
        return document.clone();
    }
    let mut at = url.clone();
    at.set_path("/openapi.json");
    at.set_query(None);
    let document: Value = Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .and_then(|client| client.get(at).send())
        .and_then(|response| response.error_for_status())
        .and_then(|response| response.json())
        .expect("fetch the server's OpenAPI document");
    let document = std::sync::Arc::new(document);
    *cached = Some(document.clone());
    document
}

/// The path template of the document that `path` (as sent, percent-encoded) is an instance
/// of, with the operation of `method` there. A literal segment wins over a parameter, as in
/// the router (`/v1/users/{user_id}/memories/search` over `…/memories/{memory_id}`).
fn operation<'a>(document: &'a Value, method: &Method, path: &str) -> Option<(&'a str, &'a Value)> {
    let segments: Vec<&str> = path.split('/').collect();
    document["paths"]
        .as_object()?
        .iter()
        .filter_map(|(template, item)| {
            let parts: Vec<&str> = template.split('/').collect();
            if parts.len() != segments.len() {
                return None;
            }
            let mut literal = 0;
            for (part, segment) in parts.iter().zip(&segments) {
                if part.starts_with('{') && part.ends_with('}') {
                    if segment.is_empty() {
                        return None;
                    }
                } else if part == segment {
                    literal += 1;
                } else {
                    return None;
                }
            }
            let operation = item.get(method.as_str().to_ascii_lowercase())?;
            Some((literal, template.as_str(), operation))
        })
        .max_by_key(|(literal, ..)| *literal)
        .map(|(_, template, operation)| (template, operation))
}

/// Asserts that the server's OpenAPI document lists `status` for the operation of `method`
/// and `url`, with the answer's `error.code` among that status's codes; the contract a
/// generated client and schemathesis read, kept by every error answer of the end-to-end
/// tests. Exempt: a path no route serves (`404 route_not_found`) and a method a path does
/// not serve (`405`), which are no operation's answers.
#[track_caller]
pub fn assert_documented(method: &Method, url: &reqwest::Url, status: u16, body: &Value) {
    check_documented(method, url, url.path(), status, body);
}

/// [`assert_documented`] for `path` as sent (percent-encoded), on the server at `server`.
#[track_caller]
fn check_documented(method: &Method, server: &reqwest::Url, path: &str, status: u16, body: &Value) {
    let code = body["error"]["code"].as_str();
    if status == 405 || (status, code) == (404, Some("route_not_found")) {
        return;
    }
    let Some(code) = code else {
        panic!("{method} {path} answered {status} without an error code: {body}");
    };
    let document = document(server);
    let Some((template, operation)) = operation(&document, method, path) else {
        panic!("{method} {path} answered {status} {code}, but the document has no such operation");
    };
    let responses = &operation["responses"];
    let range = if status >= 500 {
        responses.get("5XX")
    } else {
        None
    };
    let documented = responses
        .get(status.to_string())
        .or(range)
        .unwrap_or_else(|| {
            panic!("{method} {template} answered {status} {code}, which the document does not list")
        });
    let schema = &documented["content"]["application/json"]["schema"];
    // The range (`5XX`: `500 internal`) says no codes; a listed status names each.
    if let Some(codes) =
        schema["allOf"][1]["properties"]["error"]["properties"]["code"]["enum"].as_array()
    {
        assert!(
            codes.iter().any(|listed| listed == code),
            "{method} {template} answered {status} `{code}`, which the document does not list \
             for {status} (it lists {codes:?})"
        );
    } else {
        assert_eq!(
            (status, code),
            (500, "internal"),
            "{method} {template}: {status} `{code}` is not listed on its own"
        );
    }
}

fn body_value(bytes: &[u8]) -> Value {
    if bytes.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

fn parse_raw_response(answer: &[u8]) -> (u16, Value) {
    let text = String::from_utf8_lossy(answer);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of headers in {text:?}"));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, body_value(body.as_bytes()))
}

/// Asserts that an answer is the API's error shape, `{"error": {"code", "message"}}` with
/// nothing else, with `status` and `code` and a non-empty message. Returns the message.
#[track_caller]
pub fn assert_error(answer: &(u16, Value), status: u16, code: &str) -> String {
    let (actual_status, body) = answer;
    assert_eq!(
        (*actual_status, body["error"]["code"].as_str()),
        (status, Some(code)),
        "unexpected answer: {body}"
    );
    let object = body.as_object().expect("the error body is an object");
    assert_eq!(object.len(), 1, "only `error` in {body}");
    let error = body["error"].as_object().expect("`error` is an object");
    assert_eq!(error.len(), 2, "only `code` and `message` in {body}");
    let message = error["message"].as_str().expect("the message is a string");
    assert!(!message.trim().is_empty(), "empty message in {body}");
    message.to_owned()
}

/// Asserts that `value` is an RFC 3339 timestamp in UTC (`Z`), as the API writes them.
#[track_caller]
pub fn assert_rfc3339(value: &Value) {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("{value} is not a string"));
    let parsed = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|err| panic!("{text:?} is not RFC 3339: {err}"));
    assert!(
        text.ends_with('Z') && parsed.offset().is_utc(),
        "{text:?} is not in UTC"
    );
}

/// Asserts that `value` is a lowercase hyphenated UUID version 4 (RFC 9562).
#[track_caller]
pub fn assert_uuid_v4(value: &Value) {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("{value} is not a string"));
    let bytes = text.as_bytes();
    let shaped = bytes.len() == 36
        && bytes.iter().enumerate().all(|(i, &b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
        })
        && bytes[14] == b'4'
        && matches!(bytes[19], b'8' | b'9' | b'a' | b'b');
    assert!(shaped, "{text:?} is not a lowercase UUIDv4");
}

/// Replaces every timestamp field (`created_at`, `updated_at`, `timestamp`) anywhere in
/// `value` with `"<time>"` after checking it is RFC 3339, so that whole bodies can be
/// compared exactly with `assert_eq!`.
#[track_caller]
pub fn redact_times(mut value: Value) -> Value {
    redact_in(&mut value);
    value
}

#[track_caller]
fn redact_in(value: &mut Value) {
    match value {
        Value::Object(object) => {
            for (key, field) in object.iter_mut() {
                if matches!(key.as_str(), "created_at" | "updated_at" | "timestamp") {
                    assert_rfc3339(field);
                    *field = Value::String("<time>".into());
                } else {
                    redact_in(field);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_in),
        _ => {}
    }
}
