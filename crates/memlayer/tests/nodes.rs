//! Several `memlayer serve` processes on one PostgreSQL database, as behind a load balancer:
//! they share nothing but the database, so what one acknowledges the others serve, an
//! idempotency key holds whichever node a retry reaches, and a key revoked on one is refused
//! by all at the next request. Three nodes on loopback ports; each test has a database of
//! its own in the suite's throwaway cluster.

mod process;

use std::time::Duration;

use memlayer_postgres::test_cluster::TestDatabase;
use serde_json::{Value, json};

use process::*;

/// Three nodes on one new database, each with a data directory of its own (which on a
/// database holds only the vector snapshot).
struct Nodes {
    urls: Urls,
    _processes: Vec<Process>,
    _dirs: Vec<tempfile::TempDir>,
    _database: TestDatabase,
}

impl Nodes {
    fn start(count: usize) -> Self {
        let database = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(memlayer_postgres::test_cluster::database())
            .expect("a test database");
        let url = database.url();
        let dirs: Vec<_> = (0..count).map(|_| tempfile::tempdir().unwrap()).collect();
        // Started at once: migrations and the admin key's bootstrap take turns in the
        // database.
        let started: Vec<(Process, String)> = std::thread::scope(|scope| {
            let starting: Vec<_> = dirs
                .iter()
                .map(|dir| {
                    let url = &url;
                    scope.spawn(move || {
                        Process::serve_with(dir.path(), |command| {
                            command.env("MEMLAYER_DATABASE_URL", url);
                        })
                    })
                })
                .collect();
            starting.into_iter().map(|s| s.join().unwrap()).collect()
        });
        let (processes, urls) = started.into_iter().unzip();
        Self {
            urls: Urls(urls),
            _processes: processes,
            _dirs: dirs,
            _database: database,
        }
    }

    fn url(&self, node: usize, path: &str) -> String {
        self.urls.url(node, path)
    }
}

/// The nodes' base URLs, which threads share (the processes' guards stay with [`Nodes`]).
struct Urls(Vec<String>);

impl Urls {
    fn url(&self, node: usize, path: &str) -> String {
        format!("{}{path}", self.0[node])
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
