//! OpenAPI links: which answer supplies which later request's parameters (create a session,
//! then append to it and build its context; remember, then forget; erase, then read the
//! receipt). A generated client can follow them, and schemathesis's stateful phase walks
//! these workflows with identifiers that exist instead of drawn ones that answer `404`.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

/// Answers of the operations `from` with one of `statuses` supply `parameters` (name,
/// runtime expression) to each operation of `to`.
struct Link {
    from: &'static [&'static str],
    statuses: &'static [&'static str],
    parameters: &'static [(&'static str, &'static str)],
    to: &'static [&'static str],
}

const SESSION: (&str, &str) = ("session_id", "$response.body#/session_id");

const LINKS: &[Link] = &[
    Link {
        from: &["create_session"],
        statuses: &["201"],
        parameters: &[SESSION],
        to: &[
            "get_session",
            "append_messages",
            "list_messages",
            "search_session",
            "context",
            "entities",
            "list_runs",
            "record_run",
            "call_tool",
            "clear_session",
            "end_session",
            "delete_session",
        ],
    },
    Link {
        from: &["create_session"],
        statuses: &["201"],
        parameters: &[("user_id", "$response.body#/user_id")],
        to: &[
            "remember",
            "put_memory",
            "list_memories",
            "search_memories",
            "record_episode",
            "list_episodes",
            "list_lessons",
            "session_memory",
        ],
    },
    Link {
        from: &["append_messages"],
        statuses: &["200", "201"],
        parameters: &[SESSION],
        to: &["context", "list_messages", "search_session", "get_session"],
    },
    Link {
        from: &["append_messages"],
        statuses: &["200", "201"],
        parameters: &[SESSION, ("index", "$response.body#/indices/0")],
        to: &["erase_message"],
    },
    Link {
        from: &["run_agent"],
        statuses: &["200"],
        parameters: &[SESSION],
        to: &["get_session", "list_messages", "list_runs"],
    },
    Link {
        from: &["remember", "put_memory"],
        statuses: &["200", "201"],
        parameters: &[("memory_id", "$response.body#/memory/memory_id")],
        to: &["get_memory", "forget_memory"],
    },
    Link {
        from: &["put_memory"],
        statuses: &["200", "201"],
        parameters: &[
            ("user_id", "$response.body#/memory/user_id"),
            ("key", "$response.body#/memory/key"),
        ],
        to: &["get_memory_by_key", "put_memory"],
    },
    Link {
        from: &["record_episode"],
        statuses: &["201"],
        parameters: &[("episode_id", "$response.body#/episode_id")],
        to: &["get_episode", "delete_episode"],
    },
    Link {
        from: &["create_key"],
        statuses: &["201"],
        parameters: &[("prefix", "$response.body#/prefix")],
        to: &["revoke_key"],
    },
    Link {
        from: &["erase_user", "erase_message", "forget_memory"],
        statuses: &["200"],
        parameters: &[("erasure_id", "$response.body#/erasure_id")],
        to: &["erasure"],
    },
];

/// Adds [`LINKS`] to the responses of `doc` (the serialised document). Panics on an
/// operation, parameter or status the document does not have: the table follows the routes.
pub(crate) fn add(doc: &mut Value) {
    let parameters: HashMap<String, Vec<Value>> = operations(doc)
        .map(|operation| {
            let names = operation["parameters"].as_array().into_iter().flatten();
            let names = names.map(|parameter| parameter["name"].clone()).collect();
            (id(operation), names)
        })
        .collect();
    for link in LINKS {
        for from in link.from {
            assert!(parameters.contains_key(*from), "no operation {from}");
        }
        for to in link.to {
            let declared = parameters
                .get(*to)
                .unwrap_or_else(|| panic!("no operation {to}"));
            for (name, _) in link.parameters {
                assert!(
                    declared.contains(&json!(name)),
                    "{to} has no parameter {name}"
                );
            }
        }
    }
    for operation in operations(doc) {
        let from = id(operation);
        for link in LINKS
            .iter()
            .filter(|link| link.from.contains(&from.as_str()))
        {
            let parameters: Map<String, Value> = link
                .parameters
                .iter()
                .map(|(name, expression)| ((*name).to_owned(), json!(expression)))
                .collect();
            for status in link.statuses {
                let response = operation["responses"]
                    .get_mut(*status)
                    .unwrap_or_else(|| panic!("{from} has no {status} answer"));
                for to in link.to {
                    response["links"][*to] = json!({ "operationId": to, "parameters": parameters });
                }
            }
        }
    }
}

fn operations(doc: &mut Value) -> impl Iterator<Item = &mut Value> {
    doc["paths"]
        .as_object_mut()
        .expect("the document has paths")
        .values_mut()
        .flat_map(|item| item.as_object_mut().expect("a path item").values_mut())
}

fn id(operation: &Value) -> String {
    operation["operationId"]
        .as_str()
        .expect("every operation has an id")
        .to_owned()
}
