//! The clients of the crash test. Each runs a random mix of operations against the server
//! until the server dies under it, and keeps the model of what it was told: every
//! acknowledged write, every acknowledged erasure, and the one operation that was in flight
//! when the connection broke (uncertain: it may or may not have happened).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

/// Texts for the messages and memories, so that the embedder sees ordinary chat.
const SENTENCES: [&str; 8] = [
    "Please move my dentist appointment to Thursday afternoon",
    "The invoice for order 4471 still shows the old shipping address",
    "I prefer window seats and vegetarian meals on long flights",
    "Can you summarise what we decided about the quarterly budget",
    "My manager approved the new laptop, it should arrive next week",
    "Remind me to renew the car insurance before the end of the month",
    "The wifi in the meeting room drops every few minutes",
    "We agreed to ship the release candidate on Monday",
];
const FACTS: [&str; 6] = [
    "likes hiking in the mountains on weekends",
    "is allergic to peanuts",
    "works as a nurse on night shifts",
    "has a golden retriever called Biscuit",
    "wants answers in Spanish",
    "is saving money for a trip to Japan",
];

/// Every planted text carries one of these, so a byte scan of the data files finds it.
pub(crate) const TOKEN_PREFIX: &str = "crashtok-";

/// One message as the client sent it.
#[derive(Clone, Debug)]
pub(crate) struct Sent {
    pub(crate) content: String,
    pub(crate) token: String,
    /// The client's own count of its messages, for the order check.
    pub(crate) seq: u64,
}

/// A message the server acknowledged, at the index it acknowledged.
#[derive(Clone, Debug)]
pub(crate) struct Stored {
    pub(crate) index: u64,
    pub(crate) sent: Sent,
}

/// A memory as the client knows it: its current text and every token it ever held.
#[derive(Clone, Debug, Default)]
pub(crate) struct MemoryModel {
    pub(crate) text: String,
    pub(crate) tokens: Vec<String>,
}

/// What a client was doing when its connection broke.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    Append {
        session: String,
        key: String,
        body: Value,
        messages: Vec<Sent>,
    },
    EraseMessage {
        session: String,
        index: u64,
    },
    DeleteSession {
        session: String,
    },
    Remember {
        text: String,
        token: String,
    },
    Forget {
        id: u64,
    },
    Purge,
    Context,
}

/// A client's model of the server.
pub(crate) struct ClientState {
    pub(crate) id: usize,
    /// The purger writes to its own tenant and purges it; the others write to the default
    /// tenant.
    pub(crate) purger: bool,
    pub(crate) key: String,
    pub(crate) user: String,
    rng: StdRng,
    next_seq: u64,
    next_op: u64,
    session_generation: u64,
    /// Own sessions that exist, with their live messages in index order.
    pub(crate) sessions: BTreeMap<String, Vec<Stored>>,
    /// Own sessions deleted (acknowledged or found deleted after a crash).
    pub(crate) deleted: Vec<String>,
    /// Messages this client added to the shared sessions.
    pub(crate) shared: BTreeMap<String, Vec<Stored>>,
    pub(crate) memories: BTreeMap<u64, MemoryModel>,
    /// Tokens of everything erased, each with what erased it: no byte of them may be left in
    /// the data files.
    pub(crate) erased: BTreeMap<String, String>,
    pub(crate) uncertain: Option<Op>,
    /// The erasure the server recorded for `uncertain` without finishing it.
    pub(crate) recorded_erasure: Option<u64>,
    pub(crate) acknowledged: u64,
    /// Contradictions between an answer and the model, found while running.
    pub(crate) violations: Vec<String>,
}

/// Sessions several clients append to at once.
pub(crate) const SHARED_SESSIONS: [&str; 2] = ["shared-0", "shared-1"];
const SHARED_USER: &str = "crash-shared";
const AGENT: &str = "crash-agent";

impl ClientState {
    pub(crate) fn new(id: usize, purger: bool, key: String, seed: u64) -> Self {
        let mut state = Self {
            id,
            purger,
            key,
            user: format!("crash-user-{id}"),
            rng: StdRng::seed_from_u64(seed ^ (id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            next_seq: 0,
            next_op: 0,
            session_generation: 0,
            sessions: BTreeMap::new(),
            deleted: Vec::new(),
            shared: BTreeMap::new(),
            memories: BTreeMap::new(),
            erased: BTreeMap::new(),
            uncertain: None,
            recorded_erasure: None,
            acknowledged: 0,
            violations: Vec::new(),
        };
        state.open_session();
        state
    }

    /// The session new own messages go to.
    pub(crate) fn current_session(&self) -> String {
        format!("client-{}-gen-{}", self.id, self.session_generation)
    }

    fn open_session(&mut self) {
        self.session_generation += 1;
        self.sessions.insert(self.current_session(), Vec::new());
    }

    fn token(&mut self) -> String {
        format!("{TOKEN_PREFIX}{:016x}", self.rng.random::<u64>())
    }

    fn message(&mut self) -> Sent {
        let sentence = SENTENCES[self.rng.random_range(0..SENTENCES.len())];
        let token = self.token();
        let seq = self.next_seq;
        self.next_seq += 1;
        Sent {
            content: format!("{sentence} (client {} note {seq}) {token}", self.id),
            token,
            seq,
        }
    }

    /// An append to `session` of one or two new messages, with its idempotency key.
    fn append(&mut self, session: String) -> Op {
        let count = self.rng.random_range(1..=2);
        let messages: Vec<Sent> = (0..count).map(|_| self.message()).collect();
        let shared = SHARED_SESSIONS.contains(&session.as_str());
        let user = if shared { SHARED_USER } else { &self.user };
        let body = json!({
            "user_id": user,
            "agent_id": AGENT,
            "messages": messages.iter().map(|m| json!({
                "role": if m.seq % 2 == 0 { "user" } else { "assistant" },
                "content": m.content,
                "metadata": { "client": self.id, "seq": m.seq },
            })).collect::<Vec<_>>(),
        });
        self.next_op += 1;
        Op::Append {
            session,
            key: format!("crash-{}-{}", self.id, self.next_op),
            body,
            messages,
        }
    }

    /// The next operation, drawn from the client's mix.
    fn next(&mut self) -> Op {
        let roll = self.rng.random_range(0..100);
        if self.purger {
            // Fill two sessions of its tenant, then purge them all.
            return if roll < 12 {
                Op::Purge
            } else {
                if roll < 50 {
                    self.open_session();
                }
                self.append(self.current_session())
            };
        }
        let live: Vec<(String, u64)> = self
            .sessions
            .iter()
            .flat_map(|(session, messages)| messages.iter().map(|m| (session.clone(), m.index)))
            .collect();
        match roll {
            0..45 => self.append(self.current_session()),
            45..65 => {
                let session = SHARED_SESSIONS[self.rng.random_range(0..SHARED_SESSIONS.len())];
                self.append(session.to_owned())
            }
            65..71 if !live.is_empty() => {
                let (session, index) = live[self.rng.random_range(0..live.len())].clone();
                Op::EraseMessage { session, index }
            }
            71..74 => Op::DeleteSession {
                session: self.current_session(),
            },
            74..86 => {
                let fact = FACTS[self.rng.random_range(0..FACTS.len())];
                let token = self.token();
                Op::Remember {
                    text: format!("Client {} {fact} ({token})", self.id),
                    token,
                }
            }
            86..90 if !self.memories.is_empty() => {
                let ids: Vec<u64> = self.memories.keys().copied().collect();
                Op::Forget {
                    id: ids[self.rng.random_range(0..ids.len())],
                }
            }
            _ => Op::Context,
        }
    }

    /// Applies an operation the server acknowledged with `answer`.
    pub(crate) fn acknowledge(&mut self, op: Op, answer: &Value) {
        self.acknowledged += 1;
        match op {
            Op::Append {
                session, messages, ..
            } => self.appended(&session, messages, answer),
            Op::EraseMessage { session, index } => self.message_erased(&session, index),
            Op::DeleteSession { session } => self.session_deleted(&session),
            Op::Remember { text, token } => self.remembered(&text, &token, &answer["memory"]),
            Op::Forget { id } => self.forgotten(id),
            Op::Purge => {
                let sessions: Vec<String> = self.sessions.keys().cloned().collect();
                for session in sessions {
                    self.session_deleted(&session);
                }
            }
            Op::Context => {}
        }
    }

    fn appended(&mut self, session: &str, messages: Vec<Sent>, answer: &Value) {
        let indices: Vec<u64> = answer["indices"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default();
        if indices.len() != messages.len() {
            self.violations.push(format!(
                "client {}: append to {session} acknowledged {} indices for {} messages: {answer}",
                self.id,
                indices.len(),
                messages.len()
            ));
            return;
        }
        let stored = indices
            .into_iter()
            .zip(messages)
            .map(|(index, sent)| Stored { index, sent });
        let target = if SHARED_SESSIONS.contains(&session) {
            self.shared.entry(session.to_owned()).or_default()
        } else {
            self.sessions.entry(session.to_owned()).or_default()
        };
        target.extend(stored);
    }

    pub(crate) fn message_erased(&mut self, session: &str, index: u64) {
        if let Some(messages) = self.sessions.get_mut(session)
            && let Some(at) = messages.iter().position(|m| m.index == index)
        {
            let erased = messages.remove(at);
            let how = format!("client {}: message {session}[{index}] erased", self.id);
            self.erased.insert(erased.sent.token, how);
        }
    }

    pub(crate) fn session_deleted(&mut self, session: &str) {
        if let Some(messages) = self.sessions.remove(session) {
            let how = format!("client {}: session {session} deleted", self.id);
            self.erased.extend(
                messages
                    .into_iter()
                    .map(|m| (m.sent.token, format!("{how} ([{}])", m.index))),
            );
            self.deleted.push(session.to_owned());
        }
        if session == self.current_session() {
            self.open_session();
        }
    }

    /// A remember's answer: a new memory, or an existing one updated or unchanged.
    pub(crate) fn remembered(&mut self, text: &str, token: &str, memory: &Value) {
        let (Some(id), Some(now)) = (memory["memory_id"].as_u64(), memory["text"].as_str()) else {
            self.violations.push(format!(
                "client {}: a remember answered without a memory: {memory}",
                self.id
            ));
            return;
        };
        let entry = self.memories.entry(id).or_default();
        if now == text {
            entry.tokens.push(token.to_owned());
        }
        entry.text = now.to_owned();
    }

    pub(crate) fn forgotten(&mut self, id: u64) {
        if let Some(memory) = self.memories.remove(&id) {
            let how = format!("client {}: memory {id} forgotten", self.id);
            self.erased
                .extend(memory.tokens.into_iter().map(|token| (token, how.clone())));
        }
    }
}

/// The HTTP side of one client.
pub(crate) struct Http {
    client: reqwest::Client,
    base: String,
}

/// How a request ended.
pub(crate) enum Answer {
    /// A 2xx, with its body.
    Done(Value),
    /// Another status: the server refused; the body explains.
    Refused(u16, Value),
    /// No answer: the connection broke (the server died) or the request timed out.
    Lost,
    /// The server recorded an erasure and could not finish it now (its storage failed); it
    /// finishes by itself, and its receipt is then at `GET /v1/admin/erasures/{id}`.
    Recorded(u64),
}

impl Http {
    pub(crate) fn new(addr: SocketAddr) -> anyhow::Result<Self> {
        Ok(Self {
            client: reqwest::Client::builder()
                .no_proxy()
                .timeout(std::time::Duration::from_secs(60))
                .build()?,
            base: format!("http://{addr}"),
        })
    }

    pub(crate) async fn send(
        &self,
        key: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        idempotency_key: Option<&str>,
    ) -> Answer {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(key);
        if let Some(body) = body {
            request = request.json(body);
        }
        if let Some(idempotency_key) = idempotency_key {
            request = request.header("idempotency-key", idempotency_key);
        }
        let Ok(response) = request.send().await else {
            return Answer::Lost;
        };
        let status = response.status().as_u16();
        let Ok(bytes) = response.bytes().await else {
            return Answer::Lost;
        };
        // A `204` (a deleted session) has no body.
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            match serde_json::from_slice(&bytes) {
                Ok(body) => body,
                Err(_) => return Answer::Lost,
            }
        };
        match status {
            200..300 => Answer::Done(body),
            500.. if body["error"]["erasure_id"].is_u64() => {
                Answer::Recorded(body["error"]["erasure_id"].as_u64().unwrap_or_default())
            }
            // A timeout or an overload answer says nothing of whether the write happened.
            408 | 500.. => Answer::Lost,
            _ => Answer::Refused(status, body),
        }
    }

    /// Sends `op` as the client `state` would.
    pub(crate) async fn perform(&self, state: &ClientState, op: &Op) -> Answer {
        use reqwest::Method;
        let key = &state.key;
        match op {
            Op::Append {
                session,
                key: idempotency,
                body,
                ..
            } => {
                let path = format!("/v1/sessions/{session}/messages");
                self.send(key, Method::POST, &path, Some(body), Some(idempotency))
                    .await
            }
            Op::EraseMessage { session, index } => {
                let path = format!("/v1/sessions/{session}/messages/{index}");
                self.send(key, Method::DELETE, &path, None, None).await
            }
            Op::DeleteSession { session } => {
                let path = format!("/v1/sessions/{session}");
                self.send(key, Method::DELETE, &path, None, None).await
            }
            Op::Remember { text, .. } => {
                let path = format!("/v1/users/{}/memories", state.user);
                let body = json!({ "text": text, "type": "fact", "tags": ["crash"] });
                self.send(key, Method::POST, &path, Some(&body), None).await
            }
            Op::Forget { id } => {
                let path = format!("/v1/memories/{id}");
                self.send(key, Method::DELETE, &path, None, None).await
            }
            Op::Purge => {
                let path = "/v1/admin/conversations/purge?older_than_days=0";
                self.send(key, Method::DELETE, path, None, None).await
            }
            Op::Context => {
                let path = format!("/v1/sessions/{}/context", state.current_session());
                let body = json!({ "query": "what did we decide about the budget?" });
                self.send(key, Method::POST, &path, Some(&body), None).await
            }
        }
    }
}

/// Runs one client until the server stops answering; returns its updated model.
pub(crate) async fn run(http: Http, mut state: ClientState) -> ClientState {
    loop {
        let op = state.next();
        match http.perform(&state, &op).await {
            Answer::Done(body) => state.acknowledge(op, &body),
            // A context for a session with no message yet.
            Answer::Refused(404, _) if matches!(op, Op::Context) => {}
            // A delete of a session with no message yet, which was never created.
            Answer::Refused(404, _)
                if matches!(&op, Op::DeleteSession { session }
                    if state.sessions.get(session).is_none_or(Vec::is_empty)) =>
            {
                if let Op::DeleteSession { session } = op {
                    state.session_deleted(&session);
                }
            }
            Answer::Refused(status, body) => {
                state.violations.push(format!(
                    "client {}: {op:?} refused with {status}: {body}",
                    state.id
                ));
                return state;
            }
            Answer::Lost => {
                state.uncertain = Some(op);
                return state;
            }
            Answer::Recorded(erasure) => {
                state.uncertain = Some(op);
                state.recorded_erasure = Some(erasure);
                return state;
            }
        }
    }
}
