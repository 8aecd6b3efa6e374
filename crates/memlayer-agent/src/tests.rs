//! Unit tests of what needs no store or model: the tool definitions as the chat client sends
//! them, the parsing of a model's tool call, and context messages as chat messages. Runs
//! against a real store and a fake model over HTTP are in `tests/e2e/runs.rs`.

use memlayer_llm::Role as ChatRole;
use memlayer_memory::{ContextMessage, Layer};
use memlayer_store::Role;
use serde_json::{Value, json};

use crate::AgentError;
use crate::run::chat_message;
use crate::tools::{chat_tools, definitions, parse_call};

#[test]
fn the_chat_tools_are_the_published_definitions() {
    let definitions = definitions();
    let tools = chat_tools();
    assert_eq!(tools.len(), 5);
    for (tool, definition) in tools.iter().zip(definitions.as_array().unwrap()) {
        let function = &definition["function"];
        assert_eq!(tool.name, function["name"]);
        assert_eq!(
            tool.description.as_deref(),
            function["description"].as_str()
        );
        assert_eq!(tool.parameters, function["parameters"]);
        assert_eq!(tool.parameters["type"], "object", "{}", tool.name);
    }
}

fn refusal(name: &str, arguments: Value) -> &'static str {
    match parse_call(name, arguments) {
        Err(AgentError::Invalid { code, .. }) => code,
        Err(other) => panic!("{name}: unexpected error {other}"),
        Ok(_) => panic!("{name}: accepted"),
    }
}

#[test]
fn tool_calls_are_checked_before_anything_runs() {
    assert_eq!(refusal("memory_teleport", json!({})), "unknown_tool");
    assert_eq!(
        refusal("memory_recall", json!("{\"query\": ")),
        "invalid_arguments"
    );
    assert_eq!(
        refusal("memory_forget", json!({ "memory_id": 1, "also": true })),
        "invalid_arguments"
    );
    assert_eq!(refusal("session_search", json!({})), "invalid_arguments");
    assert_eq!(
        refusal("clear_session", json!({ "now": true })),
        "invalid_arguments"
    );
    // The JSON text a model writes and the object a client sends are the same call.
    assert!(parse_call("memory_recall", json!("{\"query\": \"tea\", \"k\": 3}")).is_ok());
    assert!(parse_call("memory_recall", json!({ "query": "tea" })).is_ok());
    assert!(parse_call("clear_session", json!({})).is_ok());
}

#[test]
fn context_messages_keep_their_roles_and_tool_output_becomes_context() {
    let message = |role: Role, content: &str| ContextMessage {
        role,
        content: content.to_owned(),
        layer: Layer::Window,
        turn: Some(1),
        sources: vec![0],
        tokens: 5,
    };
    for (role, expected) in [
        (Role::System, ChatRole::System),
        (Role::User, ChatRole::User),
        (Role::Assistant, ChatRole::Assistant),
    ] {
        let chat = chat_message(&message(role, "text"));
        assert_eq!(
            (chat.role, chat.content.as_deref()),
            (expected, Some("text"))
        );
    }
    // A stored tool output answers no call of this request, which servers refuse.
    let tool = chat_message(&message(Role::Tool, "42 °C"));
    assert_eq!(tool.role, ChatRole::System);
    assert_eq!(tool.content.as_deref(), Some("Tool output: 42 °C"));
    assert_eq!(tool.tool_call_id, None);
}
