//! The memory tools a model may call — their OpenAI function-calling definitions, the
//! parsing of a call's arguments, and their execution against a session as the session's
//! user and agent, so a model can only reach the memories and history of the conversation
//! it is in. `POST /v1/sessions/{id}/tools/call` and the run loop both execute calls here.

use memlayer_erasure::{Coordinator, ErasureRequest, Receipt, RunningErasure, Target};
use memlayer_llm::Tool;
use memlayer_memory::{LongTermMemory, MemoryHit, MemoryQuery, RememberAction, RememberRequest};
use memlayer_store::{Access, Memory, MemoryKind, Message, Session, Store};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::error::AgentError;

/// Most memories one recall returns.
pub const MAX_MEMORY_HITS: usize = 50;
/// Most messages one session search returns.
pub const MAX_SEARCH_HITS: usize = 50;

/// What the model is told about `session_search`, so it uses the tool when the answer lies
/// in the conversation's past rather than guessing.
pub const SESSION_SEARCH_INSTRUCTION: &str = "Parts of this conversation may not be in your \
context: older turns are summarised or left out. When the user refers to something said \
earlier that you cannot see (a name, a number, a decision, \"as I told you\"), call \
session_search with a few distinctive words before answering, instead of guessing.";

/// The tools' definitions, in the shape OpenAI's `tools` parameter takes.
pub fn definitions() -> Value {
    let function = |name: &str, description: &str, parameters: Value| {
        json!({ "type": "function", "function": {
            "name": name, "description": description, "parameters": parameters,
        }})
    };
    json!([
        function(
            "memory_remember",
            "Remember a durable fact, preference, relationship or instruction about the user \
             for future conversations. Restating or correcting something already remembered \
             updates it.",
            json!({ "type": "object", "additionalProperties": false, "required": ["text", "type"],
            "properties": {
                "text": { "type": "string", "description": "One short self-contained statement" },
                "type": { "type": "string", "enum": ["fact", "preference", "relationship", "instruction"] },
                "tags": { "type": "array", "items": { "type": "string" }, "maxItems": 8 },
                "agent_only": { "type": "boolean", "description": "Only this agent may see it (default: every agent of the user)" },
            }}),
        ),
        function(
            "memory_recall",
            "Search what is remembered about the user.",
            json!({ "type": "object", "additionalProperties": false, "required": ["query"],
            "properties": {
                "query": { "type": "string" },
                "k": { "type": "integer", "minimum": 1, "maximum": 50, "default": 10 },
                "types": { "type": "array", "items": { "type": "string", "enum": ["fact", "preference", "relationship", "instruction"] } },
                "tags": { "type": "array", "items": { "type": "string" } },
            }}),
        ),
        function(
            "memory_forget",
            "Forget one remembered item, by the memory_id memory_recall returned.",
            json!({ "type": "object", "additionalProperties": false, "required": ["memory_id"],
                "properties": { "memory_id": { "type": "integer", "minimum": 1 } }}),
        ),
        function(
            "session_search",
            SESSION_SEARCH_INSTRUCTION,
            json!({ "type": "object", "additionalProperties": false, "required": ["query"],
            "properties": {
                "query": { "type": "string", "description": "Words to find, case-insensitively" },
                "limit": { "type": "integer", "minimum": 1, "maximum": 50, "default": 10 },
            }}),
        ),
        function(
            "clear_session",
            "Start the conversation afresh: later context leaves out everything said so far \
             (it stays stored). Only when the user asks to start over.",
            json!({ "type": "object", "additionalProperties": false, "properties": {} }),
        ),
    ])
}

/// The definitions as the chat client's `Tool`s, for a run's requests.
pub(crate) fn chat_tools() -> Vec<Tool> {
    let Value::Array(definitions) = definitions() else {
        unreachable!("the definitions are an array literal")
    };
    definitions
        .into_iter()
        .map(|definition| {
            let function = &definition["function"];
            Tool {
                name: function["name"].as_str().unwrap_or_default().to_owned(),
                description: function["description"].as_str().map(str::to_owned),
                parameters: function["parameters"].clone(),
            }
        })
        .collect()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RememberArgs {
    text: String,
    #[serde(rename = "type")]
    kind: Value,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    agent_only: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecallArgs {
    query: String,
    k: Option<usize>,
    types: Option<Value>,
    tags: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ForgetArgs {
    memory_id: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    query: String,
    #[serde(default = "default_limit")]
    limit: usize,
}

fn default_limit() -> usize {
    10
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

/// A tool call, its arguments parsed for the tool it names.
pub struct ParsedCall(Parsed);

enum Parsed {
    Remember(RememberArgs),
    Recall(RecallArgs),
    Forget(ForgetArgs),
    Search(SearchArgs),
    Clear,
}

/// Parses `arguments` (an object, or the JSON text a model returns in
/// `tool_calls[].function.arguments`) for the tool `name`; an unknown tool or arguments it
/// does not take are refused before anything runs.
pub fn parse_call(name: &str, arguments: Value) -> Result<ParsedCall, AgentError> {
    let arguments = match arguments {
        Value::String(text) => serde_json::from_str(&text).map_err(|err| {
            AgentError::invalid(
                "invalid_arguments",
                format!("arguments are not JSON: {err}"),
            )
        })?,
        other => other,
    };
    // A model, or a Python caller, may write a count as `5.0`: the integer, in JSON Schema.
    let mut arguments = arguments;
    memlayer_memory::whole_floats_to_integers(&mut arguments);
    Ok(ParsedCall(match name {
        "memory_remember" => Parsed::Remember(parse(arguments)?),
        "memory_recall" => Parsed::Recall(parse(arguments)?),
        "memory_forget" => Parsed::Forget(parse(arguments)?),
        "session_search" => Parsed::Search(parse(arguments)?),
        "clear_session" => {
            let NoArgs {} = parse(arguments)?;
            Parsed::Clear
        }
        other => {
            return Err(AgentError::invalid(
                "unknown_tool",
                format!("no tool named {other:?}; GET /v1/tools lists them"),
            ));
        }
    }))
}

fn parse<T: DeserializeOwned>(arguments: Value) -> Result<T, AgentError> {
    serde_json::from_value(arguments)
        .map_err(|err| AgentError::invalid("invalid_arguments", err.to_string()))
}

/// A `type`/`types` argument as memory kinds.
fn kinds<T: DeserializeOwned>(field: &str, value: Value) -> Result<T, AgentError> {
    serde_json::from_value(value)
        .map_err(|err| AgentError::invalid("invalid_arguments", format!("{field}: {err}")))
}

/// What a tool call did. The HTTP layer owns how it is written as JSON (the same shapes as
/// the memory and session endpoints), and a run sends that JSON back to the model.
#[derive(Debug)]
pub enum ToolOutcome {
    /// `memory_remember`: the memory as it is now, and whether it was new.
    Remembered {
        /// The memory.
        memory: Memory,
        /// Created, updated or unchanged.
        action: RememberAction,
    },
    /// `memory_recall`: the hits, best first.
    Recalled(Vec<MemoryHit>),
    /// `memory_forget`: the erasure's receipt.
    Forgotten(Receipt),
    /// `memory_forget` still running when [`Tools::with_forget_wait`]'s wait ended: the
    /// erasure goes on, and its receipt will carry this id.
    Forgetting {
        /// The erasure's id.
        erasure_id: u64,
    },
    /// `session_search`: the matching messages, newest first.
    Found {
        /// The session searched.
        session_id: String,
        /// The matches.
        messages: Vec<Message>,
    },
    /// `clear_session`: where context loads start now.
    Cleared {
        /// The session cleared.
        session_id: String,
        /// The new load checkpoint.
        load_from: u64,
    },
}

/// Executes the memory tools. Cheap to clone.
#[derive(Clone)]
pub struct Tools {
    store: Store,
    memories: LongTermMemory,
    erasure: Coordinator,
    /// How long a `memory_forget` waits for its receipt; `None`: until it comes.
    forget_wait: Option<std::time::Duration>,
}

impl Tools {
    /// Tools over the erasure coordinator's store and `memories`.
    pub fn new(erasure: Coordinator, memories: LongTermMemory) -> Self {
        Self {
            store: erasure.store().clone(),
            memories,
            erasure,
            forget_wait: None,
        }
    }

    /// Tools whose `memory_forget` answers [`ToolOutcome::Forgetting`] once its erasure has
    /// run `wait` without finishing (a purge of a large store can take longer than a caller
    /// waits), instead of waiting for the receipt.
    pub fn with_forget_wait(self, wait: std::time::Duration) -> Self {
        Self {
            forget_wait: Some(wait),
            ..self
        }
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// Executes `call` in `session` of `tenant`, as the session's user and agent: reads and
    /// writes of the session check that it is still that user's.
    pub async fn call(
        &self,
        tenant: &str,
        session: &Session,
        call: ParsedCall,
    ) -> Result<ToolOutcome, AgentError> {
        let access = Access::one_user(tenant, &*session.user_id);
        let tenant = tenant.to_owned();
        Ok(match call.0 {
            Parsed::Remember(args) => {
                let (memory, action) = self
                    .memories
                    .remember(RememberRequest {
                        access: access.clone(),
                        user_id: session.user_id.clone(),
                        agent_id: args.agent_only.then(|| session.agent_id.clone()),
                        text: args.text,
                        kind: kinds::<MemoryKind>("type", args.kind)?,
                        tags: args.tags,
                        source: None,
                        key: None,
                    })
                    .await?;
                ToolOutcome::Remembered { memory, action }
            }
            Parsed::Recall(args) => ToolOutcome::Recalled(
                self.recall(MemoryQuery {
                    tenant,
                    user_id: session.user_id.clone(),
                    agent_id: Some(session.agent_id.clone()),
                    query: args.query,
                    k: args.k.unwrap_or(10),
                    kinds: args.types.map(|types| kinds("types", types)).transpose()?,
                    tags: args.tags,
                })
                .await?,
            ),
            // A model may only forget the memories of the user it talks to.
            Parsed::Forget(args) => {
                self.forget(tenant, args.memory_id, Some(&session.user_id))
                    .await?
            }
            Parsed::Search(args) => ToolOutcome::Found {
                messages: self
                    .search_session(access, session.id.clone(), args.query, args.limit)
                    .await?,
                session_id: session.id.clone(),
            },
            Parsed::Clear => ToolOutcome::Cleared {
                load_from: self
                    .store
                    .sessions()
                    .clear_session(&access, &session.id)
                    .await?,
                session_id: session.id.clone(),
            },
        })
    }

    /// Hybrid recall of a user's memories, at most [`MAX_MEMORY_HITS`]. A blank query is
    /// refused, as `/v1/recall` refuses one: it could only match nothing, which a caller
    /// would read as "nothing is remembered".
    pub async fn recall(&self, query: MemoryQuery) -> Result<Vec<MemoryHit>, AgentError> {
        check_count("k", query.k, MAX_MEMORY_HITS)?;
        memlayer_store::validate_text("query", &query.query)?;
        if query.query.trim().is_empty() {
            return Err(AgentError::invalid(
                "invalid_value",
                "query must not be blank",
            ));
        }
        Ok(self.memories.recall(query).await?)
    }

    /// Forgets a memory through the erasure coordinator; with `owner`, only one of that
    /// user's. Answers the receipt once no byte of it is left, or, past the forget wait,
    /// the running erasure's id.
    async fn forget(
        &self,
        tenant: String,
        memory_id: u64,
        owner: Option<&str>,
    ) -> Result<ToolOutcome, AgentError> {
        let mut running = self.start_forgetting(tenant, memory_id, owner).await?;
        let erasure_id = running.id();
        let ended = match self.forget_wait {
            Some(wait) => running.outcome_within(wait).await,
            None => Some(running.outcome().await),
        };
        Ok(match ended {
            Some(receipt) => ToolOutcome::Forgotten(receipt?),
            None => ToolOutcome::Forgetting { erasure_id },
        })
    }

    /// A memory's erasure, started (with `owner`, only one of that user's): it goes on when
    /// the caller stops waiting.
    pub async fn start_forgetting(
        &self,
        tenant: String,
        memory_id: u64,
        owner: Option<&str>,
    ) -> Result<RunningErasure, AgentError> {
        let found = self.memories.get(&tenant, memory_id)?;
        if found.is_none_or(|memory| owner.is_some_and(|owner| memory.user_id != owner)) {
            return Err(AgentError::MemoryNotFound { memory_id });
        }
        let request = ErasureRequest {
            tenant,
            target: Target::Memory { memory_id },
            requested_by: "api".into(),
            user_id: owner.map(str::to_owned),
        };
        Ok(self.erasure.start(request).await?)
    }

    /// `session_search`: case-insensitive keyword search over a session's whole history,
    /// newest first, at most `limit` (1 to [`MAX_SEARCH_HITS`]).
    pub async fn search_session(
        &self,
        access: Access,
        session_id: String,
        query: String,
        limit: usize,
    ) -> Result<Vec<Message>, AgentError> {
        check_count("limit", limit, MAX_SEARCH_HITS)?;
        // A scan of the session's messages: keep it off the async workers.
        Ok(self
            .store
            .read(move |store| {
                store
                    .sessions()
                    .search_messages(&access, &session_id, &query, limit)
            })
            .await?)
    }
}

fn check_count(name: &str, value: usize, max: usize) -> Result<(), AgentError> {
    if (1..=max).contains(&value) {
        Ok(())
    } else {
        Err(AgentError::invalid(
            "invalid_value",
            format!("{name} must be between 1 and {max}"),
        ))
    }
}
