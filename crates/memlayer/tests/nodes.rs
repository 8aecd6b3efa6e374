//! Several `memlayer serve` processes on one PostgreSQL database, as behind a load balancer.
//! They share nothing but the database: what one acknowledges the others serve, recall
//! included; an
//! idempotency key holds whichever node a retry reaches; a key revoked on one is refused by
//! all at the next request; a purge whose node dies is finished by another, with one
//! receipt; and every node recovers by itself from a database restart. Three nodes on
//! loopback ports; each test has a database of its own.

mod process;

use std::time::Duration;

use memlayer_postgres::test_cluster::{TestCluster, TestDatabase};
use serde_json::{Value, json};

use process::*;

/// Three nodes on one new database, each with a data directory of its own (which on a
/// database holds only the vector snapshot).
struct Nodes {
    urls: Urls,
    processes: Vec<Process>,
    dirs: Vec<tempfile::TempDir>,
    database: TestDatabase,
}

impl Nodes {
    /// `count` nodes on a new database of the suite's shared cluster.
    fn start(count: usize) -> Self {
        let database = runtime()
            .block_on(memlayer_postgres::test_cluster::database())
            .expect("a test database");
        Self::on(database, count)
    }

    /// `count` nodes on `database`.
    fn on(database: TestDatabase, count: usize) -> Self {
        Self::on_with(database, count, |_| {})
    }

    /// `count` nodes on `database`, each command adjusted by `adjust` after [`node`].
    fn on_with(
        database: TestDatabase,
        count: usize,
        adjust: impl Fn(&mut std::process::Command) + Sync,
    ) -> Self {
        let url = database.url();
        let dirs: Vec<_> = (0..count).map(|_| tempfile::tempdir().unwrap()).collect();
        // Started at once: migrations and the admin key's bootstrap take turns in the
        // database.
        let started: Vec<(Process, String)> = std::thread::scope(|scope| {
            let starting: Vec<_> = dirs
                .iter()
                .map(|dir| {
                    let (url, adjust) = (&url, &adjust);
                    scope.spawn(move || {
                        Process::serve_with(dir.path(), |command| {
                            node(command, url);
                            adjust(command);
                        })
                    })
                })
                .collect();
            starting.into_iter().map(|s| s.join().unwrap()).collect()
        });
        let (processes, urls) = started.into_iter().unzip();
        Self {
            urls: Urls(urls),
            processes,
            dirs,
            database,
        }
    }

    fn url(&self, node: usize, path: &str) -> String {
        self.urls.url(node, path)
    }

    /// Kills `node` (SIGKILL).
    fn kill(&mut self, node: usize) {
        self.processes[node].child.kill().unwrap();
        self.processes[node].child.wait().unwrap();
    }

    /// Starts `node` again on its data directory, after [`Nodes::kill`]; it listens on a
    /// new port.
    fn restart(&mut self, node: usize) {
        let url = self.database.url();
        let (process, address) =
            Process::serve_with(self.dirs[node].path(), |command| self::node(command, &url));
        self.processes[node] = process;
        self.urls.0[node] = address;
    }
}

/// `memlayer serve` as a node on the database at `url`, without the per-key rate limit: the
/// tests send hundreds of requests a second with one key, and a node's limit is its own.
fn node(command: &mut std::process::Command, url: &str) {
    command
        .env("MEMLAYER_DATABASE_URL", url)
        .env("MEMLAYER_RATE_LIMIT_PER_SECOND", "0");
}

/// A runtime for the test's own calls to the database helpers.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The nodes' base URLs, which threads share (the processes' guards stay with [`Nodes`]).
struct Urls(Vec<String>);

impl Urls {
    fn url(&self, node: usize, path: &str) -> String {
        format!("{}{path}", self.0[node])
    }
}

/// Asks `probe` every 50 ms until it answers, and fails with `failure` once `deadline`
/// passed without an answer.
fn poll_until<T>(
    deadline: std::time::Instant,
    mut probe: impl FnMut() -> Option<T>,
    failure: impl Fn() -> String,
) -> T {
    loop {
        if let Some(answer) = probe() {
            return answer;
        }
        assert!(std::time::Instant::now() < deadline, "{}", failure());
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn send(request: reqwest::blocking::RequestBuilder) -> (u16, Value) {
    let response = request.send().expect("the node answers");
    let status = response.status().as_u16();
    (status, response.json().expect("a JSON body"))
}

/// Every node sees the session the others wrote: appends with one idempotency key sent to
/// all three nodes at once store one message, whichever node committed it, and every send
/// answers its indices; indices stay dense; the context built on any node holds what
/// another acknowledged.
#[test]
fn appends_through_three_nodes_stay_dense_and_store_each_key_once() {
    let nodes = Nodes::start(3);
    let (status, body) = post(
        &nodes.url(0, "/v1/sessions/shared/messages"),
        &json!({ "role": "system", "content": "be brief", "user_id": "u", "agent_id": "a" }),
    );
    assert_eq!(status, 201, "{body}");

    const WRITERS: usize = 3;
    const EACH: usize = 8;
    let answers: Vec<(String, Vec<(u16, Value)>)> = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let nodes = &nodes.urls;
                scope.spawn(move || {
                    (0..EACH)
                        .map(|n| {
                            let key = format!("w{writer}-m{n}");
                            let body = json!({ "role": "user", "content": format!("said {key}") });
                            // The same request through every node at once: a client retrying
                            // on another node while the first attempt is still in flight.
                            let sends: Vec<(u16, Value)> = std::thread::scope(|scope| {
                                (0..3)
                                    .map(|node| {
                                        let (key, body) = (&key, &body);
                                        scope.spawn(move || {
                                            send(
                                                client()
                                                    .post(nodes.url(
                                                        (node + writer + n) % 3,
                                                        "/v1/sessions/shared/messages",
                                                    ))
                                                    .header("Idempotency-Key", key)
                                                    .json(body),
                                            )
                                        })
                                    })
                                    .collect::<Vec<_>>()
                                    .into_iter()
                                    .map(|send| send.join().unwrap())
                                    .collect()
                            });
                            (key, sends)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        writers
            .into_iter()
            .flat_map(|writer| writer.join().unwrap())
            .collect()
    });

    let mut indices = vec![0];
    for (key, sends) in &answers {
        let created = sends.iter().filter(|(status, _)| *status == 201).count();
        assert_eq!(
            created, 1,
            "{key}: one send stores it, the others replay: {sends:?}"
        );
        let first = &sends.iter().find(|(status, _)| *status == 201).unwrap().1;
        for (status, answer) in sends {
            assert!(*status == 201 || *status == 200, "{key}: {answer}");
            assert_eq!(answer["indices"], first["indices"], "{key}: {sends:?}");
            assert_eq!(answer["replayed"], json!(*status == 200), "{key}: {answer}");
        }
        indices.push(first["indices"][0].as_u64().unwrap());
    }
    indices.sort_unstable();
    let expected: Vec<u64> = (0..=(WRITERS * EACH) as u64).collect();
    assert_eq!(indices, expected, "dense, each index once");

    for node in 0..3 {
        let (status, stored) = get(&nodes.url(node, "/v1/sessions/shared/messages?limit=1000"));
        assert_eq!(status, 200, "{stored}");
        let contents: Vec<&str> = stored["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|message| message["content"].as_str().unwrap())
            .collect();
        assert_eq!(
            contents.len(),
            WRITERS * EACH + 1,
            "node {node}: {contents:?}"
        );
        for (key, _) in &answers {
            let said = format!("said {key}");
            assert_eq!(
                contents.iter().filter(|c| **c == said).count(),
                1,
                "node {node}: {said}"
            );
        }
    }

    // Acknowledged on one node, in the next context another node builds.
    let (status, _) = post(
        &nodes.url(2, "/v1/sessions/shared/messages"),
        &json!({ "role": "user", "content": "my locker code is 4711" }),
    );
    assert_eq!(status, 201);
    for node in 0..2 {
        let (status, context) = post(
            &nodes.url(node, "/v1/sessions/shared/context"),
            &json!({ "format": "text" }),
        );
        assert_eq!(status, 200, "{context}");
        assert!(
            context["text"].as_str().unwrap().contains("4711"),
            "node {node}: {context}"
        );
    }
}

/// A key made on one node works on every node; revoked on one, every node refuses it at
/// the next request (nothing about keys is cached on a node).
/// An append acknowledged by one node is found by meaning on the others at their next
/// request: every node's indexes follow the shared outbox (the append is embedded once, by
/// whichever node claims it), and a recall first waits for the outbox's head as the database
/// has it (read-your-writes across nodes). An erasure through one node is followed the same
/// way: the others take it out of their indexes.
#[test]
fn an_append_on_one_node_is_recalled_on_the_others_and_its_erasure_leaves_them_all() {
    let nodes = Nodes::start(3);
    let mut messages = vec![json!({
        "role": "user",
        "content": "We fly to Lisbon in May for our anniversary.",
    })];
    for n in 0..10 {
        messages.push(json!({ "role": "assistant", "content": format!("Noted, item {n}.") }));
        messages.push(json!({ "role": "user", "content": format!("Next, item {n}.") }));
    }
    let (status, body) = post(
        &nodes.url(0, "/v1/sessions/trip/messages"),
        &json!({ "user_id": "ada", "agent_id": "a", "messages": messages }),
    );
    assert_eq!(status, 201, "{body}");
    for node in [1, 2] {
        let (status, answer) = post(
            &nodes.url(node, "/v1/recall"),
            &json!({ "user_id": "ada", "query": "a holiday in Portugal" }),
        );
        assert_eq!(status, 200, "{answer}");
        let top = &answer["hits"][0];
        assert_eq!(top["index"], 0, "node {node}: {answer}");
        assert!(top["vector_rank"].is_u64(), "found by meaning: {answer}");
        assert!(answer["degraded"].is_null(), "{answer}");
    }
    // A context built on another node recalls the turn its window left out.
    let (status, answer) = post(
        &nodes.url(2, "/v1/sessions/trip/context"),
        &json!({
            "query": "Where are we going on holiday?",
            "format": "text",
            "settings": { "max_turns": 2 },
        }),
    );
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer["text"].as_str().unwrap().contains("Lisbon"),
        "{answer}"
    );

    // Deleted through one node, the conversation leaves every node's indexes (vectors,
    // keywords, the snapshot) by itself, within seconds.
    let deleted = client()
        .delete(nodes.url(1, "/v1/sessions/trip"))
        .send()
        .unwrap();
    assert_eq!(deleted.status().as_u16(), 204);
    let vectors = |node: usize| metric(&nodes, node, "memlayer_index_vectors ");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    for node in [0, 2] {
        poll_until(
            deadline,
            || (vectors(node) == "memlayer_index_vectors 0").then_some(()),
            || format!("node {node}: {}", vectors(node)),
        );
        let (status, answer) = post(
            &nodes.url(node, "/v1/recall"),
            &json!({ "user_id": "ada", "query": "Lisbon" }),
        );
        assert_eq!((status, &answer["hits"]), (200, &json!([])), "{answer}");
    }
}

/// The line of `node`'s metrics that starts with `name`.
fn metric(nodes: &Nodes, node: usize, name: &str) -> String {
    let metrics = client()
        .get(nodes.url(node, "/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    metrics
        .lines()
        .find(|line| line.starts_with(name))
        .unwrap_or_default()
        .to_owned()
}

/// Sends `signal` (`STOP`, `CONT`) to `node`'s process.
fn signal(nodes: &Nodes, node: usize, signal: &str) {
    let pid = nodes.processes[node].child.id().to_string();
    let sent = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{signal} {pid}");
}

/// An erasure's receipt waits for every live node: with one node frozen (as a paused or
/// cut-off process is), an erasure through another is acknowledged only once the frozen
/// node's record lapsed, and by then the third node dropped it already. Thawed, the frozen
/// node learns it lapsed and drops what was erased as it catches up.
#[test]
fn an_erasure_waits_for_every_live_node_and_a_lapsed_node_catches_up() {
    let nodes = Nodes::start(3);
    let (status, body) = post(
        &nodes.url(0, "/v1/sessions/trip/messages"),
        &json!({ "user_id": "ada", "agent_id": "a", "messages": [
            { "role": "user", "content": "We fly to Lisbon in May for our anniversary." },
            { "role": "assistant", "content": "Noted: Lisbon in May." },
        ]}),
    );
    assert_eq!(status, 201, "{body}");
    for node in [1, 2] {
        let (status, answer) = post(
            &nodes.url(node, "/v1/recall"),
            &json!({ "user_id": "ada", "query": "Lisbon" }),
        );
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["hits"].as_array().unwrap().len(), 2, "{answer}");
    }

    signal(&nodes, 2, "STOP");
    // The database drops the frozen node's connections, as it does a client cut off (TCP
    // keepalives) or idle in a transaction for longer than `idle_in_transaction_session_timeout`:
    // a transaction it left open would otherwise hold back the erasure's reclaim of keys.
    let node_id = std::fs::read_to_string(nodes.dirs[2].path().join("node-id")).unwrap();
    runtime().block_on(async {
        let client = nodes.database.connect().await.unwrap();
        client
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE application_name = $1",
                &[&format!("memlayer {}", node_id.trim())],
            )
            .await
            .unwrap();
    });
    let started = std::time::Instant::now();
    let deleted = client()
        .delete(nodes.url(1, "/v1/sessions/trip"))
        .send()
        .unwrap();
    let took = started.elapsed();
    assert_eq!(
        deleted.status().as_u16(),
        204,
        "{}",
        nodes.processes[1].stderr()
    );
    // Node 2 recorded its position at most about three seconds before it froze, and a
    // record lapses after ten: until then the erasure waited for it.
    assert!(
        took >= Duration::from_secs(5),
        "acknowledged after {took:?}, before the frozen node lapsed"
    );
    // The live node dropped it before the acknowledgement: no waiting here.
    assert_eq!(
        metric(&nodes, 0, "memlayer_index_vectors "),
        "memlayer_index_vectors 0"
    );

    signal(&nodes, 2, "CONT");
    // Thawed, the node knows its record lapsed before the database tells it: it is ready
    // again only once it recorded itself, learnt what it must catch up with, and did.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let ready = || {
        client()
            .get(nodes.url(2, "/readyz"))
            .send()
            .unwrap()
            .status()
    };
    poll_until(
        deadline,
        || (ready().as_u16() == 200).then_some(()),
        || format!("node 2 did not catch up: {}", nodes.processes[2].stderr()),
    );
    assert_eq!(
        metric(&nodes, 2, "memlayer_index_vectors "),
        "memlayer_index_vectors 0",
        "node 2 was ready with the erased vectors"
    );
    // The warning came before the node was ready; its pipe may still be on the way here.
    poll_until(
        deadline,
        || {
            nodes.processes[2]
                .stderr()
                .contains("stopped following the shared outbox")
                .then_some(())
        },
        || {
            format!(
                "node 2 did not learn that it lapsed: {}",
                nodes.processes[2].stderr()
            )
        },
    );
    let (status, answer) = post(
        &nodes.url(2, "/v1/recall"),
        &json!({ "user_id": "ada", "query": "Lisbon" }),
    );
    assert_eq!((status, &answer["hits"]), (200, &json!([])), "{answer}");
}

/// A user erased through one node is gone from every node by the receipt: the other nodes
/// never return any of it (recall, search, the session, memories), every node's indexes and
/// resident memories dropped it before the receipt was written, every data key the erasure
/// destroyed has been reclaimed from the cluster's files, and no file of the cluster or of a
/// node's data directory holds the canary.
#[test]
fn a_user_erased_through_one_node_is_gone_from_every_node_by_the_receipt() {
    let nodes = Nodes::start(3);
    let canary = format!("canary{}", std::process::id());
    for (session, user) in [("eve-1", "eve"), ("eve-2", "eve"), ("kept", "bob")] {
        let (status, body) = post(
            &nodes.url(0, &format!("/v1/sessions/{session}/messages")),
            &json!({ "user_id": user, "agent_id": "a", "messages": [
                { "role": "user", "content": format!("My locker code is {canary} and I am {user}.") },
                { "role": "assistant", "content": "Noted." },
            ]}),
        );
        assert_eq!(status, 201, "{body}");
    }
    let (status, body) = post(
        &nodes.url(0, "/v1/users/eve/memories"),
        &json!({ "text": format!("Eve's locker code is {canary}."), "type": "fact" }),
    );
    assert_eq!(status, 201, "{body}");
    // Every node holds it: indexed, and Eve's memories resident.
    for node in [1, 2] {
        let (status, found) = post(
            &nodes.url(node, "/v1/recall"),
            &json!({ "user_id": "eve", "query": canary }),
        );
        assert_eq!((status, found["hits"].as_array().unwrap().len()), (200, 4));
        let (status, found) = post(
            &nodes.url(node, "/v1/users/eve/memories/search"),
            &json!({ "query": "locker code" }),
        );
        assert_eq!((status, found["hits"].as_array().unwrap().len()), (200, 1));
    }

    let (status, receipt) = send(client().delete(nodes.url(0, "/v1/users/eve")));
    assert_eq!(status, 200, "{receipt}");
    assert_eq!(receipt["counts"]["sessions"], 2, "{receipt}");
    for node in [0, 1, 2] {
        // Bob's two messages stay; Eve's four and her memory left before the receipt.
        assert_eq!(
            (
                metric(&nodes, node, "memlayer_index_vectors "),
                metric(&nodes, node, "memlayer_memory_resident_memories "),
            ),
            (
                "memlayer_index_vectors 2".to_owned(),
                "memlayer_memory_resident_memories 0".to_owned()
            ),
            "node {node}"
        );
    }
    for node in [1, 2] {
        for (path, body) in [
            ("/v1/recall", json!({ "user_id": "eve", "query": canary })),
            (
                "/v1/users/eve/memories/search",
                json!({ "query": "locker code" }),
            ),
        ] {
            let (status, found) = post(&nodes.url(node, path), &body);
            assert_eq!((status, &found["hits"]), (200, &json!([])), "{path}");
        }
        let (status, _) = get(&nodes.url(node, "/v1/sessions/eve-1"));
        assert_eq!(status, 404);
        let (status, found) =
            get(&nodes.url(node, &format!("/v1/sessions/kept/search?q={canary}")));
        assert_eq!(
            (status, found["hits"].as_array().map(Vec::len)),
            (200, Some(1))
        );
    }

    let scanned = runtime().block_on(async {
        let client = nodes.database.connect().await.unwrap();
        let left: i64 = client
            .query_one("SELECT count(*) FROM destroyed_keys", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            left, 0,
            "destroyed keys not yet reclaimed from the cluster's files"
        );
        client.batch_execute("CHECKPOINT").await.unwrap();
        let dir: String = client
            .query_one("SELECT current_setting('data_directory')", &[])
            .await
            .unwrap()
            .get(0);
        std::path::PathBuf::from(dir)
    });
    let mut files = memlayer_erasure::files_under(&scanned).unwrap();
    for dir in &nodes.dirs {
        files.extend(memlayer_erasure::files_under(dir.path()).unwrap());
    }
    let files: Vec<&std::path::Path> = files.iter().map(std::path::PathBuf::as_path).collect();
    let found = memlayer_erasure::scan_files(&files, canary.as_bytes()).unwrap();
    assert!(found.is_empty(), "{found:?}");
}

/// A key's rate limit holds across nodes: each of two nodes admits half of the key's burst,
/// so requests alternating between them are admitted no more often than through one node.
#[test]
fn a_keys_rate_limit_holds_across_nodes() {
    let database = runtime()
        .block_on(memlayer_postgres::test_cluster::database())
        .expect("a test database");
    let nodes = Nodes::on_with(database, 2, |command| {
        command
            .env("MEMLAYER_RATE_LIMIT_PER_SECOND", "1")
            .env("MEMLAYER_RATE_LIMIT_BURST", "6");
    });
    // Each node counts the other from its next record (one at least every 3 s). Polling would
    // spend the admin key's cells: one look a node.
    std::thread::sleep(Duration::from_secs(4));
    for node in [0, 1] {
        assert_eq!(
            metric(&nodes, node, "memlayer_nodes_live "),
            "memlayer_nodes_live 2"
        );
    }
    // A key of its own: the admin key spent some of its cells above.
    let (status, created) = post(
        &nodes.url(0, "/v1/keys"),
        &json!({ "role": "service", "name": "limited" }),
    );
    assert_eq!(status, 201, "{created}");
    let limited = client_with_key(created["key"].as_str().unwrap());
    let admitted = (0..12)
        .filter(|n| {
            let answer = limited
                .get(nodes.url(n % 2, "/v1/sessions"))
                .send()
                .unwrap();
            answer.status().as_u16() != 429
        })
        .count();
    // Three a node (6 / 2), and at most one more each as the cells refill meanwhile; through
    // each node's own limit it would be six a node.
    assert!((6..=8).contains(&admitted), "{admitted} of 12 admitted");
}

/// Long-term memories follow across nodes: a node holding a user's memories in memory
/// (loaded by a search) finds the one another node remembers next, and a memory forgotten
/// through another node has left its memory by the time that erasure is acknowledged.
#[test]
fn memories_remembered_and_forgotten_on_one_node_are_followed_by_the_others() {
    let nodes = Nodes::start(2);
    let remember = |text: &str| -> u64 {
        let (status, remembered) = post(
            &nodes.url(0, "/v1/users/ada/memories"),
            &json!({ "text": text, "type": "fact" }),
        );
        assert_eq!(status, 201, "{remembered}");
        remembered["memory"]["memory_id"].as_u64().unwrap()
    };
    let search = |query: &str| -> Vec<u64> {
        let (status, found) = post(
            &nodes.url(1, "/v1/users/ada/memories/search"),
            &json!({ "query": query }),
        );
        assert_eq!(status, 200, "{found}");
        found["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|hit| hit["memory_id"].as_u64().unwrap())
            .collect()
    };
    let key = remember("Ada keeps the spare key under the blue flowerpot.");
    assert_eq!(search("where is the spare key"), [key]);
    let bicycle = remember("Ada rides a red Gazelle bicycle with a wicker basket.");
    assert_eq!(search("what bicycle does Ada ride")[0], bicycle);

    let forgotten = client()
        .delete(nodes.url(0, &format!("/v1/memories/{key}")))
        .send()
        .unwrap();
    assert!(forgotten.status().is_success(), "{}", forgotten.status());
    assert_eq!(
        metric(&nodes, 1, "memlayer_memory_resident_memories "),
        "memlayer_memory_resident_memories 1",
        "node 1 still holds the forgotten memory"
    );
    assert_eq!(search("where is the spare key"), [bicycle]);
}

#[test]
fn a_key_revoked_on_one_node_is_refused_by_every_node_at_once() {
    let nodes = Nodes::start(3);
    let (status, created) = post(
        &nodes.url(0, "/v1/keys"),
        &json!({ "role": "service", "name": "backend" }),
    );
    assert_eq!(status, 201, "{created}");
    let key = created["key"].as_str().unwrap().to_owned();
    let prefix = created["prefix"].as_str().unwrap().to_owned();
    let list_sessions = |node: usize| {
        client_with_key(&key)
            .get(nodes.url(node, "/v1/sessions"))
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(
        (list_sessions(0), list_sessions(1), list_sessions(2)),
        (200, 200, 200)
    );

    let (status, revoked) = send(client().delete(nodes.url(0, &format!("/v1/keys/{prefix}"))));
    assert_eq!((status, &revoked["state"]), (200, &json!("revoked")));
    assert_eq!(
        (list_sessions(1), list_sessions(2), list_sessions(0)),
        (401, 401, 401)
    );
    // And a node that never saw the key's creation or revocation still lists it revoked.
    let (status, listed) = get(&nodes.url(2, "/v1/keys"));
    assert_eq!(status, 200);
    let state = listed["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|listed| listed["prefix"] == json!(prefix))
        .map(|listed| listed["state"].clone());
    assert_eq!(state, Some(json!("revoked")), "{listed}");
    // A moment later, too: no node caches an answer for the key.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(list_sessions(1), 401);
}

/// Sessions the purge test makes: enough that the purge is still running when its node is
/// killed (it erases 64 at a time, each a transaction).
const PURGED: usize = 800;

fn sessions_left(nodes: &Nodes, node: usize) -> u64 {
    let (status, listed) = get(&nodes.url(node, "/v1/sessions?page_size=1"));
    assert_eq!(status, 200, "{listed}");
    listed["total_elements"].as_u64().unwrap()
}

/// Fills [`PURGED`] sessions through every node, starts a purge of them all on `node` and
/// kills that node once the purge has erased some of them and not all.
fn kill_during_a_purge(nodes: &mut Nodes, node: usize) {
    let count = nodes.urls.0.len();
    std::thread::scope(|scope| {
        for part in 0..8 {
            let urls = &nodes.urls;
            scope.spawn(move || {
                for n in (part..PURGED).step_by(8) {
                    let answer = send(
                        client()
                            .post(urls.url(n % count, &format!("/v1/sessions/old-{n}/messages")))
                            .json(&json!({
                                "role": "user", "content": "to be purged",
                                "user_id": format!("u{}", n % 7), "agent_id": "a",
                            })),
                    );
                    assert_eq!(answer.0, 201, "{}", answer.1);
                }
            });
        }
    });
    let watcher = (node + 1) % count;
    assert_eq!(sessions_left(nodes, watcher), PURGED as u64);

    // The purge runs in the node's background: its answer never comes.
    let purge_url = nodes.url(node, "/v1/admin/conversations/purge?older_than_days=0");
    std::thread::spawn(move || {
        let _ = client().delete(purge_url).send();
    });
    let started = std::time::Instant::now();
    loop {
        let left = sessions_left(nodes, watcher);
        if left < PURGED as u64 {
            assert!(left > 0, "the purge ended before its node could be killed");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the purge never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    nodes.kill(node);
}

/// The erasures' receipts `node` lists.
fn receipts_on(nodes: &Nodes, node: usize) -> Vec<Value> {
    let (status, listed) = get(&nodes.url(node, "/v1/admin/erasures"));
    assert_eq!(status, 200, "{listed}");
    listed["erasures"].as_array().unwrap().clone()
}

/// A purge whose node is killed part-way is finished by another node once the dead node's
/// lease on the job ran out (15 s), and the job has one receipt.
#[test]
fn a_purge_whose_node_is_killed_is_finished_by_another_with_one_receipt() {
    let mut nodes = Nodes::start(3);
    kill_during_a_purge(&mut nodes, 0);

    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let receipts = poll_until(
        deadline,
        || Some(receipts_on(&nodes, 2)).filter(|receipts| !receipts.is_empty()),
        || "no node finished the purge within 60 s of its node's death".into(),
    );
    assert_eq!(receipts.len(), 1, "{receipts:?}");
    assert_eq!(receipts[0]["resumed"], json!(true), "{receipts:?}");
    for node in [1, 2] {
        assert_eq!(sessions_left(&nodes, node), 0, "node {node}");
    }
    // The one receipt, a moment later: the other live node did not run the job again.
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(receipts_on(&nodes, 1).len(), 1);
}

/// A tenant's retention pass that falls due on several nodes at once runs on one of them:
/// each node's maintenance looks for due passes as it starts, and the three nodes started
/// together find the same pass due. One receipt (a pass leaves one even when it erased
/// nothing, as here: nothing is a day old).
#[test]
fn a_retention_pass_due_on_every_node_runs_once() {
    let nodes = Nodes::start(1);
    // Set after the node's start-up pass: due at the next start.
    let (status, body) = send(
        client()
            .put(nodes.url(0, "/v1/admin/retention"))
            .json(&json!({ "conversation_retention_days": 1 })),
    );
    assert_eq!(status, 200, "{body}");
    let Nodes {
        database,
        processes,
        ..
    } = nodes;
    drop(processes);

    let nodes = Nodes::on(database, 3);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    poll_until(
        deadline,
        || (!receipts_on(&nodes, 0).is_empty()).then_some(()),
        || "the pass never ran".into(),
    );
    // Every node's start-up pass has ended by now, and each would have left its receipt.
    std::thread::sleep(Duration::from_secs(3));
    let receipts = receipts_on(&nodes, 1);
    assert_eq!(receipts.len(), 1, "{receipts:?}");
    assert_eq!(
        receipts[0]["requested_by"],
        json!("retention"),
        "{receipts:?}"
    );
}

/// A node killed during a purge and started again on its data directory finishes the purge
/// before it serves, as a server on a store file does: it keeps its name in the job leases
/// (the data directory's `node-id`), so its own lease does not hold it off for 15 s. A client
/// that lost the purge's answer and then finds every session still there may go on using
/// them; a purge finishing later would erase what it wrote since.
#[test]
fn a_node_restarted_after_a_kill_finishes_its_purge_before_serving() {
    let mut nodes = Nodes::start(1);
    kill_during_a_purge(&mut nodes, 0);
    nodes.restart(0);
    let receipts = receipts_on(&nodes, 0);
    assert_eq!(
        receipts.len(),
        1,
        "finished before the first request: {receipts:?}"
    );
    assert_eq!(receipts[0]["resumed"], json!(true), "{receipts:?}");
    assert_eq!(sessions_left(&nodes, 0), 0);
}

/// PostgreSQL stopped as a power cut would under appends through three nodes, then started
/// again: requests meanwhile fail (and are retried with their idempotency keys), every node
/// takes writes again by itself, and every acknowledged append is stored once, densely.
#[test]
fn nodes_recover_by_themselves_when_the_database_restarts_under_load() {
    let cluster = TestCluster::start().expect("a cluster of the test's own");
    let database = runtime().block_on(cluster.database()).unwrap();
    let nodes = Nodes::on(database, 3);
    let restarted = std::sync::atomic::AtomicBool::new(false);
    /// Appends each writer has acknowledged after the restart before it stops.
    const AFTER_RESTART: usize = 10;

    let acknowledged: Vec<Vec<String>> = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..3)
            .map(|writer| {
                let (urls, restarted) = (&nodes.urls, &restarted);
                scope.spawn(move || {
                    let mut acknowledged = Vec::new();
                    let mut after_restart = 0;
                    let deadline = std::time::Instant::now() + Duration::from_secs(120);
                    let http = client();
                    for n in 0.. {
                        let content = format!("w{writer} n{n}");
                        // Retried with its key until acknowledged, on the writer's node and
                        // then the next: an answer lost in the stop is replayed, not stored
                        // twice.
                        for attempt in 0.. {
                            assert!(
                                std::time::Instant::now() < deadline,
                                "writer {writer} not acknowledged within 120 s: {content}"
                            );
                            let node = (writer + attempt) % 3;
                            let answer = http
                                .post(
                                    urls.url(node, &format!("/v1/sessions/load-{writer}/messages")),
                                )
                                .header("Idempotency-Key", format!("{writer}-{n}"))
                                .json(&json!({
                                    "role": "user", "content": content,
                                    "user_id": "u", "agent_id": "a",
                                }))
                                .send();
                            match answer.map(|answer| answer.status().as_u16()) {
                                Ok(200 | 201) => break,
                                Ok(503) | Err(_) => {
                                    std::thread::sleep(Duration::from_millis(50));
                                }
                                Ok(status) => panic!("writer {writer}: {status} for {content}"),
                            }
                        }
                        acknowledged.push(content);
                        if restarted.load(std::sync::atomic::Ordering::SeqCst) {
                            after_restart += 1;
                            if after_restart == AFTER_RESTART {
                                return acknowledged;
                            }
                        }
                    }
                    unreachable!()
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs(2));
        cluster.crash().unwrap();
        std::thread::sleep(Duration::from_secs(1));
        cluster.restart().unwrap();
        restarted.store(true, std::sync::atomic::Ordering::SeqCst);
        writers.into_iter().map(|w| w.join().unwrap()).collect()
    });

    for (writer, acknowledged) in acknowledged.iter().enumerate() {
        for node in 0..3 {
            let (status, stored) = get(&nodes.url(
                node,
                &format!("/v1/sessions/load-{writer}/messages?limit=1000"),
            ));
            assert_eq!(status, 200, "{stored}");
            let messages = stored["messages"].as_array().unwrap();
            let indices: Vec<u64> = messages
                .iter()
                .map(|message| message["index"].as_u64().unwrap())
                .collect();
            assert_eq!(indices, (0..messages.len() as u64).collect::<Vec<_>>());
            let contents: Vec<&str> = messages
                .iter()
                .map(|message| message["content"].as_str().unwrap())
                .collect();
            assert_eq!(contents, *acknowledged, "writer {writer} on node {node}");
        }
    }
}
