//! An agent run: the user's message stored, the turn's context assembled exactly as
//! `/context` assembles it, the model called with the memory tools, their calls executed in
//! a bounded loop, and the answer and the run record stored.
//!
//! A run is split in two so that the HTTP layer can answer a bad request with a plain error
//! and a good one with a stream: [`Agent::start`] checks the request and durably stores the
//! user's message; [`Agent::run`] or [`Agent::stream`] does the rest on a spawned task, so a
//! client that goes away (or the server's request timeout) never cuts a run off between
//! the model's answer and its record. Since a run outlives its request, the server's limit on
//! requests in flight does not bound runs: [`Agent`] has a limit of its own, a permit taken
//! in [`Agent::start`] before anything is stored and held by the [`Turn`] until the run's
//! record is written.
//!
//! A chat turn ([`Agent::start_chat`], for `POST /v1/openai/chat/completions`) is a run
//! whose model call is the client's own: its system messages, tools and parameters, with
//! memlayer's context in place of the conversation, one call, and the answer — text or tool
//! calls for the client to run — passed back as the model gave it. The steps around the call
//! (the message stored first, the context, the answer and the record stored, the run slots)
//! are an agent run's.

use std::sync::Arc;
use std::time::Instant;

use memlayer_llm::{
    ChatClient, ChatRequest, Completion, LlmError, Message as ChatMessage, StreamDelta, ToolChoice,
    Usage,
};
use memlayer_memory::{ContextBuilder, ContextMessage, ContextRequest, TokenEncoding};
use memlayer_store::{
    Access, Append, Message, Metadata, NewMessage, NewRun, NewSession, Role, RunStatus, Session,
    SessionState, Store, StoreError, blocking, validate_id,
};
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::error::AgentError;
use crate::tools::{SESSION_SEARCH_INSTRUCTION, ToolOutcome, Tools, chat_tools, parse_call};

/// Most rounds of tool calls in one run. The request after the last round forbids tools
/// (`tool_choice: none`), so a model that keeps calling tools still ends with an answer and a
/// run costs at most `MAX_TOOL_ROUNDS + 1` model calls.
pub const MAX_TOOL_ROUNDS: usize = 4;

/// How many streamed events may wait for a slow client before the run waits for it.
const EVENT_BUFFER: usize = 64;

/// Writes a tool's outcome as the JSON the model gets back. The HTTP layer supplies it, so a
/// run sends the model exactly what `POST /v1/sessions/{id}/tools/call` answers.
pub type RenderTool = fn(ToolOutcome) -> Value;

/// A run to start.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// The tenant.
    pub tenant: String,
    /// The agent answering.
    pub agent_id: String,
    /// The user speaking.
    pub user_id: String,
    /// The conversation to continue (one of this user with this agent); a new one when
    /// `None`.
    pub session_id: Option<String>,
    /// The user's message.
    pub message: String,
}

impl RunRequest {
    /// The checks [`Agent::start`] runs before it reads or stores anything: a message with
    /// text, valid ids.
    pub fn validate(&self) -> Result<(), AgentError> {
        if self.message.trim().is_empty() {
            return Err(AgentError::invalid(
                "invalid_value",
                "message must not be empty",
            ));
        }
        validate_id("agent_id", &self.agent_id)?;
        validate_id("user_id", &self.user_id)?;
        if let Some(id) = &self.session_id {
            validate_id("session_id", id)?;
        }
        Ok(())
    }
}

/// The client's part of a chat turn's model call: everything of its request but the
/// conversation, which memlayer's context replaces.
#[derive(Debug, Clone, Default)]
pub struct ClientCall {
    /// The client's system messages, sent first, before the context.
    pub instructions: Vec<ChatMessage>,
    /// What follows the user's message when the client ran tools the model called: the
    /// assistant's tool calls and their results, sent after the context. Not stored.
    pub tool_results: Vec<ChatMessage>,
    /// The tools, tool choice and sampling parameters, as the call sends them; its messages
    /// are replaced.
    pub parameters: ChatRequest,
}

/// A run whose user message is stored, ready for [`Agent::run`] or [`Agent::stream`].
#[derive(Debug)]
pub struct Turn {
    /// The run acts for the session's user: every read and write checks the session is still
    /// theirs.
    access: Access,
    session: Session,
    created_session: bool,
    /// The index of the user's message in the session.
    question_index: u64,
    message: String,
    model: ChatClient,
    /// For a chat turn, the client's part of the call; `None` for an agent run.
    chat: Option<Box<ClientCall>>,
    started: Instant,
    /// One of the agent's run slots, released when the turn is dropped: after its record is
    /// written.
    _slot: OwnedSemaphorePermit,
}

impl Turn {
    /// The session the run is in.
    pub fn session_id(&self) -> &str {
        &self.session.id
    }
}

/// A finished run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// The run's id.
    pub run_id: String,
    /// Its session.
    pub session_id: String,
    /// Whether the run created the session.
    pub created_session: bool,
    /// The answer, stored as the session's assistant message.
    pub content: String,
    /// `COMPLETED`.
    pub status: RunStatus,
    /// The tool calls executed, as recorded in the run: call id, name, round, ok, and the
    /// error code of a refused one.
    pub tool_calls: Vec<Value>,
    /// Tokens of every model call of the run, added up.
    pub usage: Usage,
    /// The model's last answer as it came: for a chat turn, what the client gets back (its
    /// tool calls, finish reason, id and model).
    pub answer: Completion,
}

/// What a streamed run reports, in order: deltas and tool calls, then `Finished` once.
#[derive(Debug)]
pub enum RunEvent {
    /// More of the answer, as the model streams it: text, or a piece of a tool call (which a
    /// chat turn's client runs; an agent run runs its own and reports [`RunEvent::ToolCall`]).
    Delta(StreamDelta),
    /// A tool call was executed (`ok: false` when it was refused; the model got the error).
    ToolCall {
        /// The tool's name.
        name: String,
        /// Whether it succeeded.
        ok: bool,
    },
    /// The run ended: its answer and record are stored, or it failed and is recorded so.
    Finished(Box<Result<RunOutcome, AgentError>>),
}

/// Runs agents. Cheap to clone.
#[derive(Clone)]
pub struct Agent {
    store: Store,
    contexts: ContextBuilder,
    tools: Tools,
    model: Option<ChatClient>,
    encoding: TokenEncoding,
    render: RenderTool,
    /// A permit per run that may be going on at once.
    slots: Arc<Semaphore>,
    max_runs: usize,
}

impl Agent {
    /// Runs answered by `model` (`None`: every run is refused with
    /// [`AgentError::ModelNotConfigured`]), with the context `contexts` builds, the memory
    /// `tools`, and messages counted with `encoding`; at most `max_runs` at once (one more is
    /// refused with [`AgentError::Overloaded`]).
    pub fn new(
        contexts: ContextBuilder,
        tools: Tools,
        model: Option<ChatClient>,
        encoding: TokenEncoding,
        render: RenderTool,
        max_runs: usize,
    ) -> Self {
        Self {
            store: tools.store().clone(),
            contexts,
            tools,
            model,
            encoding,
            render,
            slots: Arc::new(Semaphore::new(max_runs)),
            max_runs,
        }
    }

    /// The memory tools.
    pub fn tools(&self) -> &Tools {
        &self.tools
    }

    /// Checks the request and durably stores the user's message, creating the session when
    /// none is named. Nothing is stored when it fails: an invalid request, a session that is
    /// not this user's with this agent (`SessionNotFound`), no model configured, or as many
    /// runs going on as the agent admits (`Overloaded`; never queued).
    pub async fn start(&self, request: RunRequest) -> Result<Turn, AgentError> {
        self.begin(request, None).await
    }

    /// [`Agent::start`] for a chat turn, whose model call is `call` with the context in
    /// place of the conversation. The message is not stored again when the session's last
    /// message is this same unanswered user message: the client retries after a failure, or
    /// sends the results of the tools the model called, and the turn goes on from it.
    pub async fn start_chat(
        &self,
        request: RunRequest,
        call: ClientCall,
    ) -> Result<Turn, AgentError> {
        self.begin(request, Some(Box::new(call))).await
    }

    async fn begin(
        &self,
        request: RunRequest,
        chat: Option<Box<ClientCall>>,
    ) -> Result<Turn, AgentError> {
        request.validate()?;
        let RunRequest {
            tenant,
            agent_id,
            user_id,
            session_id,
            message,
        } = request;
        // The run acts for its user only: another user's session is not found, checked again
        // in the transaction that stores the message.
        let access = Access::one_user(tenant, &*user_id);
        let mut pending = None;
        if let Some(id) = &session_id {
            let session = self.session(&access, id).await?;
            if session.agent_id != agent_id {
                // Another user's or agent's conversation is not found, never forbidden:
                // existence must not leak.
                return Err(StoreError::SessionNotFound {
                    session_id: id.clone(),
                }
                .into());
            }
            if chat.is_some() {
                pending = self
                    .unanswered(&access, &session)
                    .await?
                    .filter(|question| question.content == message)
                    .map(|question| question.index);
            }
        }
        let model = self.model.clone().ok_or(AgentError::ModelNotConfigured)?;
        let slot =
            Arc::clone(&self.slots)
                .try_acquire_owned()
                .map_err(|_| AgentError::Overloaded {
                    limit: self.max_runs,
                })?;
        let (session_id, create) = match session_id {
            Some(id) => (id, None),
            None => (
                uuid::Uuid::new_v4().to_string(),
                Some(NewSession {
                    user_id,
                    agent_id,
                    flow_id: None,
                    metadata: Metadata::new(),
                }),
            ),
        };
        let started = Instant::now();
        let (created_session, question_index) = match pending {
            Some(index) => (false, index),
            None => {
                let user_message = self.new_message(Role::User, message.clone()).await?;
                // Stored before the model is called: whatever happens to the call or the
                // process, the user's message is not lost, and the session shows an
                // incomplete turn.
                let appended = self
                    .store
                    .sessions()
                    .append(
                        &access,
                        &session_id,
                        Append {
                            messages: vec![user_message],
                            create,
                            idempotency_key: None,
                        },
                    )
                    .await?;
                (appended.created_session, appended.first_index)
            }
        };
        let session = self.session(&access, &session_id).await?;
        Ok(Turn {
            access,
            session,
            created_session,
            question_index,
            message,
            model,
            chat,
            started,
            _slot: slot,
        })
    }

    /// Finishes the run and returns its outcome; an upstream failure is
    /// [`AgentError::Upstream`], with the failed run recorded.
    pub async fn run(&self, turn: Turn) -> Result<RunOutcome, AgentError> {
        let agent = self.clone();
        tokio::spawn(async move { agent.finish(turn, None).await })
            .await
            .map_err(AgentError::Task)?
    }

    /// Finishes the run with the model's answer streamed: deltas as they arrive, then
    /// [`RunEvent::Finished`]. The run goes on if the receiver is dropped.
    pub fn stream(&self, turn: Turn) -> mpsc::Receiver<RunEvent> {
        let (sender, receiver) = mpsc::channel(EVENT_BUFFER);
        let agent = self.clone();
        tokio::spawn(async move {
            let finished = agent.finish(turn, Some(&sender)).await;
            let _ = sender.send(RunEvent::Finished(Box::new(finished))).await;
        });
        receiver
    }

    async fn finish(
        &self,
        turn: Turn,
        events: Option<&mpsc::Sender<RunEvent>>,
    ) -> Result<RunOutcome, AgentError> {
        let mut record = Record::default();
        let answered = self.converse(&turn, events, &mut record).await;
        let session_id = turn.session.id.clone();
        let mut metadata = record.metadata(turn.model.config().model.as_str());
        metadata.insert("question_index".into(), json!(turn.question_index));
        if turn.chat.is_some() {
            metadata.insert("kind".into(), json!("chat_completion"));
        }
        // The run points at the answer rather than holding a copy of it: erasing the
        // message must leave no copy of its text behind (see `Record`). An answer of only
        // tool calls is no message: the client runs them, and the turn goes on with their
        // results.
        let content = answered
            .as_ref()
            .ok()
            .filter(|answer| {
                let text = answer.content.as_deref().unwrap_or_default();
                answer.tool_calls.is_empty() || !text.is_empty()
            })
            .map(|answer| answer.content.clone().unwrap_or_default());
        if let Some(content) = content {
            let answer = self.new_message(Role::Assistant, content).await?;
            let appended = self
                .store
                .sessions()
                .append(
                    &turn.access,
                    &session_id,
                    Append {
                        messages: vec![answer],
                        create: None,
                        idempotency_key: None,
                    },
                )
                .await?;
            metadata.insert("answer_index".into(), json!(appended.first_index));
        }
        // Whoever reads the session's runs, a user's own key included, sees what failed in
        // general words; the upstream's address and answers are the operator's, for the log.
        let (status, error) = match &answered {
            Ok(_) => (RunStatus::Completed, None),
            Err(Failure::Upstream(err)) => (RunStatus::Failed, Some(err.public_reason())),
            Err(Failure::Agent(_)) => (
                RunStatus::Failed,
                Some("memlayer could not complete the run; the details are in its log".to_owned()),
            ),
        };
        let latency_ms = u64::try_from(turn.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        metadata.insert("latency_ms".into(), json!(latency_ms));
        let run = NewRun {
            run_id: None,
            status,
            content: None,
            tool_calls: record.tool_calls.clone(),
            error,
            metadata,
        };
        let run = self
            .store
            .sessions()
            .record_run(&turn.access, &session_id, run)
            .await?;
        // Logged here, where every run ends, rather than where its error is answered: a
        // client that went away gets no answer. Ids chosen by clients (the session's) stay
        // out of the log; the run's id is the server's.
        let failure = answered.as_ref().err().map(Failure::for_log);
        tracing::info!(
            run = %run.run_id,
            status = ?run.status,
            latency_ms,
            model_calls = record.model_calls,
            tool_calls = record.tool_calls.len(),
            error = failure.as_deref(),
            "agent run finished"
        );
        match answered {
            Ok(answer) => Ok(RunOutcome {
                run_id: run.run_id,
                session_id,
                created_session: turn.created_session,
                content: answer.content.clone().unwrap_or_default(),
                status: run.status,
                tool_calls: run.tool_calls,
                usage: record.usage,
                answer,
            }),
            Err(Failure::Upstream(source)) => Err(AgentError::Upstream {
                run_id: run.run_id,
                session_id,
                source: Box::new(source),
            }),
            Err(Failure::Agent(err)) => Err(err),
        }
    }

    /// Context, model, tools, model …: the model's last answer. A chat turn's one call is
    /// the client's, its tool calls the client's to run.
    async fn converse(
        &self,
        turn: &Turn,
        events: Option<&mpsc::Sender<RunEvent>>,
        record: &mut Record,
    ) -> Result<Completion, Failure> {
        let built = self
            .contexts
            .build(ContextRequest {
                access: turn.access.clone(),
                session_id: turn.session.id.clone(),
                query: Some(turn.message.clone()),
                overrides: Default::default(),
            })
            .await
            .map_err(|err| Failure::Agent(err.into()))?;
        let context = built.assembled.messages.iter().map(chat_message);
        if let Some(call) = &turn.chat {
            let mut messages = call.instructions.clone();
            messages.extend(context);
            messages.extend(call.tool_results.iter().cloned());
            let request = ChatRequest {
                messages,
                ..call.parameters.clone()
            };
            let completion = complete(&turn.model, &request, events)
                .await
                .map_err(Failure::Upstream)?;
            record.add(&completion);
            record.tool_calls.extend(completion.tool_calls.iter().map(
                |call| json!({ "id": call.id, "name": call.name, "round": 1, "run_by": "client" }),
            ));
            return Ok(completion);
        }
        let mut messages = vec![ChatMessage::system(SESSION_SEARCH_INSTRUCTION)];
        messages.extend(context);
        let tools = chat_tools();
        for round in 0..=MAX_TOOL_ROUNDS {
            let last = round == MAX_TOOL_ROUNDS;
            let request = ChatRequest {
                messages: messages.clone(),
                tools: tools.clone(),
                tool_choice: last.then_some(ToolChoice::None),
                ..ChatRequest::default()
            };
            let mut completion = complete(&turn.model, &request, events)
                .await
                .map_err(Failure::Upstream)?;
            record.add(&completion);
            if completion.tool_calls.is_empty() || last {
                // Calls made against `tool_choice: none` are not run: the answer is its text.
                completion.tool_calls.clear();
                return Ok(completion);
            }
            messages.push(ChatMessage::assistant_tool_calls(
                completion.tool_calls.clone(),
            ));
            for call in completion.tool_calls {
                let result = self.call_tool(turn, &call.name, &call.arguments).await;
                let (content, refused) = match result {
                    Ok(result) => (result.to_string(), None),
                    // The model gets the refusal and may correct itself; a failure of the
                    // store or the indexes ends the run instead.
                    Err(err @ (AgentError::Invalid { .. } | AgentError::MemoryNotFound { .. })) => {
                        let code = match &err {
                            AgentError::Invalid { code, .. } => *code,
                            _ => "memory_not_found",
                        };
                        let error =
                            json!({ "error": { "code": code, "message": err.to_string() } });
                        (error.to_string(), Some(code))
                    }
                    Err(err) => return Err(Failure::Agent(err)),
                };
                let ok = refused.is_none();
                let mut recorded = json!({
                    "id": call.id,
                    "name": call.name,
                    "round": round + 1,
                    "ok": ok,
                });
                if let Some(code) = refused {
                    recorded["error"] = json!(code);
                }
                record.tool_calls.push(recorded);
                if let Some(events) = events {
                    let _ = events
                        .send(RunEvent::ToolCall {
                            name: call.name.clone(),
                            ok,
                        })
                        .await;
                }
                messages.push(ChatMessage::tool_result(call.id, content));
            }
        }
        unreachable!("the last round returns")
    }

    async fn call_tool(
        &self,
        turn: &Turn,
        name: &str,
        arguments: &str,
    ) -> Result<Value, AgentError> {
        // Some servers send no arguments at all for a tool that takes none.
        let arguments = if arguments.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            Value::String(arguments.to_owned())
        };
        let call = parse_call(name, arguments)?;
        let outcome = self
            .tools
            .call(turn.access.tenant(), &turn.session, call)
            .await?;
        Ok((self.render)(outcome))
    }

    /// The session's last message if it is a user message with no answer after it.
    async fn unanswered(
        &self,
        access: &Access,
        session: &Session,
    ) -> Result<Option<Message>, AgentError> {
        if session.state != SessionState::IncompleteTurn {
            return Ok(None);
        }
        let (access, id) = (access.clone(), session.id.clone());
        let last = session.message_count.saturating_sub(1);
        let mut messages = self
            .store
            .read(move |store| store.sessions().messages(&access, &id, last, 1))
            .await?;
        Ok(messages.pop().filter(|message| message.role == Role::User))
    }

    async fn session(&self, access: &Access, session_id: &str) -> Result<Session, AgentError> {
        let (access, id) = (access.clone(), session_id.to_owned());
        Ok(self
            .store
            .read(move |store| {
                store
                    .sessions()
                    .session(&access, &id)?
                    .ok_or(StoreError::SessionNotFound { session_id: id })
            })
            .await?)
    }

    /// A message to store, its tokens counted on the blocking pool (a long message takes
    /// milliseconds).
    async fn new_message(&self, role: Role, content: String) -> Result<NewMessage, AgentError> {
        let encoding = self.encoding;
        blocking(move || {
            let token_count = encoding.count(&content);
            Ok::<_, AgentError>(NewMessage::new(role, content, token_count))
        })
        .await
    }
}

/// Why a run failed: the model, or memlayer itself.
#[derive(Debug)]
enum Failure {
    Upstream(LlmError),
    Agent(AgentError),
}

impl Failure {
    fn for_log(&self) -> String {
        match self {
            Self::Upstream(err) => err.for_log(),
            Self::Agent(err) => err.for_log(),
        }
    }
}

/// What a run did so far, for its record.
///
/// Tool calls are recorded by call id, name, round and outcome, never with their arguments
/// or results: those hold memory texts and conversation content (a remembered fact, a
/// search's hits), and forgetting the memory or erasing the message must not leave a copy in
/// a run record. The same goes for the answer, which the record points at by index.
#[derive(Default)]
struct Record {
    tool_calls: Vec<Value>,
    usage: Usage,
    model_calls: u32,
}

impl Record {
    fn add(&mut self, completion: &Completion) {
        self.model_calls += 1;
        if let Some(usage) = completion.usage {
            self.usage.prompt_tokens += usage.prompt_tokens;
            self.usage.completion_tokens += usage.completion_tokens;
            self.usage.total_tokens += usage.total_tokens;
        }
    }

    fn metadata(&self, model: &str) -> Metadata {
        let mut metadata = Metadata::new();
        metadata.insert("model".into(), json!(model));
        metadata.insert("model_calls".into(), json!(self.model_calls));
        metadata.insert("usage".into(), json!(self.usage));
        metadata
    }
}

/// One model call: streamed when someone listens, deltas forwarded as they come.
async fn complete(
    model: &ChatClient,
    request: &ChatRequest,
    events: Option<&mpsc::Sender<RunEvent>>,
) -> Result<Completion, LlmError> {
    let Some(events) = events else {
        return model.complete(request).await;
    };
    let mut stream = model.stream(request).await?;
    while let Some(delta) = stream.next_delta().await? {
        // A client that went away does not stop the run: its answer is still stored.
        let _ = events.send(RunEvent::Delta(delta)).await;
    }
    stream.finish().await
}

/// A piece of assembled context as a chat message.
pub(crate) fn chat_message(message: &ContextMessage) -> ChatMessage {
    match message.role {
        Role::System => ChatMessage::system(message.content.clone()),
        Role::User => ChatMessage::user(message.content.clone()),
        Role::Assistant => ChatMessage::assistant(message.content.clone()),
        // A stored tool output has no call id to answer, and OpenAI-compatible servers
        // refuse a `tool` message that answers no call: it goes in as context instead.
        Role::Tool => ChatMessage::system(format!("Tool output: {}", message.content)),
    }
}
