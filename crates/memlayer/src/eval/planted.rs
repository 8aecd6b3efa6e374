//! `memlayer eval planted`: whether each context strategy puts the fact a question needs
//! into the context it assembles, measured without a model.
//!
//! Memory can fail at three levels: storage (the fact was never persisted), retrieval (it
//! was persisted but not put into the context) and utilisation (the model had it and did not
//! use it). This evaluation checks the first two and nothing else: a planted fact is
//! *stored* when the store holds the message stating it, and *retrieved* when its expected
//! value appears in the context `memlayer_memory::assemble` builds for the question. A
//! corrected value only counts when the old value does not stand uncorrected beside it.
//!
//! Conversations (`script`) are appended to a real store, embedded by the real model through
//! the recall pipeline, and read back from the store before each assembly, exactly as the
//! `/context` endpoint reads them. The combined strategy recalls with the question over the
//! same store. Every miss of the combined strategy is traced to its cause (the extractor, the
//! recall ranking or the packing) so the report says what to fix.

mod report;
mod script;

use std::collections::BTreeMap;

use anyhow::Context as _;
use memlayer_embed::Embedder;
use memlayer_memory::{
    Assembled, ContextMessage, ContextRequest, ContextSettings, FactSheet, Layer, OutputFormat,
    RecallScope, RecalledMessage, Rendered, Strategy, TokenEncoding, extract, render,
};
use memlayer_store::{Access, Append, Message, Metadata, NewMessage, NewSession, Role};
use serde::Serialize;

use super::stack::Stack;
pub(crate) use report::Report;
use report::{
    CaseResult, ConversationResult, CrossRow, CrossSessionResult, FinalTurn, Judgement, Miss,
    PlantStored, ProbeResult, Setup, StrategySetup, SuiteResult, TradeOff, Verdict, WindowTally,
    share,
};
use script::{CONVERSATION_TURNS, Probe};

const TENANT: &str = "default";
const AGENT: &str = "planted-agent";
/// Older messages the combined strategy recalls: the default `recall_k`.
const RECALL_K: usize = 4;
/// The windows (`max_turns`) the trade-off table sets on the combined strategy, beside its
/// default, which adapts.
const TRADE_OFF_WINDOWS: [usize; 4] = [2, 4, 6, 10];
/// How many recall hits a diagnosis looks through for a fact recall did not bring.
const DIAGNOSIS_DEPTH: usize = 50;
/// The server's default token encoding.
const ENCODING: TokenEncoding = TokenEncoding::Cl100kBase;

/// The strategies compared, each with the settings the evaluation gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Contender {
    FullHistory,
    SlidingWindow,
    HistoryDepth,
    Combined,
}

const CONTENDERS: [Contender; 4] = [
    Contender::FullHistory,
    Contender::SlidingWindow,
    Contender::HistoryDepth,
    Contender::Combined,
];

impl Contender {
    fn name(self) -> &'static str {
        match self {
            Self::FullHistory => "full_history",
            Self::SlidingWindow => "sliding_window",
            Self::HistoryDepth => "history_depth",
            Self::Combined => "combined",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::FullHistory => "every exchange",
            Self::SlidingWindow => "the last 10 exchanges",
            Self::HistoryDepth => "the last 20 exchanges, older questions as stubs",
            Self::Combined => {
                "the defaults: a window that adapts (4 exchanges when the context recalls, else \
                 10), known facts, and 4 messages recalled with the question"
            }
        }
    }

    fn settings(self, context_window: u32) -> ContextSettings {
        let base = ContextSettings {
            context_window,
            ..ContextSettings::default()
        };
        match self {
            Self::FullHistory => ContextSettings {
                strategy: Strategy::FullHistory,
                ..base
            },
            Self::SlidingWindow => ContextSettings {
                strategy: Strategy::SlidingWindow,
                max_turns: Some(10),
                ..base
            },
            Self::HistoryDepth => ContextSettings {
                strategy: Strategy::HistoryDepth,
                session_history_depth: 20,
                ..base
            },
            Self::Combined => ContextSettings {
                strategy: Strategy::Combined,
                recall_k: RECALL_K,
                ..base
            },
        }
    }
}

/// A session and its owner.
struct Thread {
    session: String,
    user: String,
}

impl Thread {
    fn new(session: &str, user: &str) -> Self {
        Self {
            session: session.to_owned(),
            user: user.to_owned(),
        }
    }
}

/// Runs every part of the evaluation on one fresh store.
pub(crate) async fn evaluate(embedder: &Embedder, context_window: u32) -> anyhow::Result<Report> {
    let settings = Contender::FullHistory.settings(context_window);
    settings.validate().context("invalid --context-window")?;
    let started = std::time::Instant::now();
    let stack = Stack::open(embedder)?;
    let outcome = async {
        let mut run = Run {
            stack: &stack,
            context_window,
            appended: 0,
            misses: Vec::new(),
            windows: BTreeMap::new(),
        };
        let conversation = run.conversation().await?;
        let suite = run.suite().await?;
        let cross_session = run.cross_session().await?;
        let trade_off = TradeOff::new(&conversation, &suite, &run.windows);
        Ok(Report::new(
            Setup {
                context_window,
                budget: settings.budget(),
                encoding: "cl100k_base",
                recall_k: RECALL_K,
                embedding_model: embedder.identity().name.clone(),
                strategies: CONTENDERS
                    .iter()
                    .map(|&contender| StrategySetup {
                        name: contender,
                        description: contender.describe(),
                    })
                    .collect(),
            },
            conversation,
            suite,
            cross_session,
            trade_off,
            run.misses,
            started.elapsed().as_secs_f64(),
        ))
    }
    .await;
    stack.close().await?;
    outcome
}

/// One evaluation in progress.
struct Run<'a> {
    stack: &'a Stack,
    context_window: u32,
    /// Messages appended so far, all of which the pipeline must embed before a recall.
    appended: usize,
    /// Every miss of the combined strategy, with its cause.
    misses: Vec<Miss>,
    /// The combined strategy with each of [`TRADE_OFF_WINDOWS`] set.
    windows: BTreeMap<usize, WindowTally>,
}

/// A question put to every strategy: where it is asked, the session as stored then, and
/// the fact it needs.
struct Question<'a> {
    /// Where in the evaluation, for the list of misses.
    at: String,
    thread: &'a Thread,
    messages: &'a [Message],
    /// The user's earlier sessions, which a user-scope recall also searches.
    earlier_sessions: &'a [(&'a str, &'a [Message])],
    probe: &'a Probe,
}

/// One assembled context and what recall handed to it.
struct Assembly {
    assembled: Assembled,
    /// The context in the plain-text format.
    text: String,
    recalled: Vec<RecalledMessage>,
}

impl Run<'_> {
    /// The 60-turn conversation, appended turn by turn; at each question (and at the last
    /// turn, for the token comparison) every strategy assembles the context from what the
    /// store holds then, the question included.
    async fn conversation(&mut self) -> anyhow::Result<ConversationResult> {
        let script = script::conversation();
        let thread = Thread::new("conversation", "conversation-user");
        let mut probes = Vec::new();
        let mut final_tokens = BTreeMap::new();
        for (position, exchange) in script.turns.iter().enumerate() {
            let turn = position + 1;
            self.append(&thread, vec![(Role::User, exchange.user.as_str())])
                .await?;
            let probe = script.probes.iter().find(|(at, _)| *at == turn);
            if probe.is_some() || turn == CONVERSATION_TURNS {
                self.settle().await?;
                let messages = self.messages(&thread)?;
                for contender in CONTENDERS {
                    let assembly = self
                        .assemble(&thread, contender, RecallScope::Session, &exchange.user)
                        .await?;
                    if turn == CONVERSATION_TURNS {
                        final_tokens.insert(contender, assembly.assembled.report.total_tokens);
                    }
                    if let Some((_, probe)) = probe {
                        let question = Question {
                            at: format!("conversation, turn {turn}"),
                            thread: &thread,
                            messages: &messages,
                            earlier_sessions: &[],
                            probe,
                        };
                        let judgement = self
                            .judge(&question, contender, RecallScope::Session, &assembly)
                            .await?;
                        record(&mut probes, turn, probe, &messages, contender, judgement);
                    }
                }
            }
            if turn == CONVERSATION_TURNS {
                for max_turns in TRADE_OFF_WINDOWS {
                    let assembly = self
                        .assemble_windowed(&thread, max_turns, &exchange.user)
                        .await?;
                    self.windows
                        .entry(max_turns)
                        .or_default()
                        .conversation_tokens = assembly.assembled.report.total_tokens;
                }
            }
            self.append(
                &thread,
                vec![(Role::Assistant, exchange.assistant.as_str())],
            )
            .await?;
        }
        let stored = self.messages(&thread)?;
        let plants = script
            .plants
            .iter()
            .map(|&(turn, fact)| PlantStored {
                turn,
                fact,
                // The user message of turn t has index 2(t - 1).
                stored: stored
                    .get(2 * (turn - 1))
                    .is_some_and(|m| m.content == script.turns[turn - 1].user),
            })
            .collect();
        Ok(ConversationResult {
            turns: CONVERSATION_TURNS,
            plants,
            probes,
            final_turn: FinalTurn::new(CONVERSATION_TURNS, final_tokens),
        })
    }

    /// The 20 cases, each its own session: all appended first and embedded together (the
    /// filler they share is embedded once, the embedder caching by content), then assembled.
    async fn suite(&mut self) -> anyhow::Result<SuiteResult> {
        let cases = script::suite();
        let threads: Vec<Thread> = cases
            .iter()
            .map(|case| {
                let id = format!("suite-{:?}-{}", case.kind, case.depth).to_lowercase();
                Thread::new(&id, &format!("{id}-user"))
            })
            .collect();
        for (case, thread) in cases.iter().zip(&threads) {
            let mut messages: Vec<(Role, &str)> = Vec::new();
            for exchange in &case.turns {
                messages.push((Role::User, &exchange.user));
                messages.push((Role::Assistant, &exchange.assistant));
            }
            messages.push((Role::User, case.probe.query));
            self.append(thread, messages).await?;
        }
        self.settle().await?;
        let mut results = Vec::with_capacity(cases.len());
        for (case, thread) in cases.iter().zip(&threads) {
            let messages = self.messages(thread)?;
            let mut judged = BTreeMap::new();
            for contender in CONTENDERS {
                let assembly = self
                    .assemble(thread, contender, RecallScope::Session, case.probe.query)
                    .await?;
                let question = Question {
                    at: format!("suite, {:?} at depth {}", case.kind, case.depth).to_lowercase(),
                    thread,
                    messages: &messages,
                    earlier_sessions: &[],
                    probe: &case.probe,
                };
                let judgement = self
                    .judge(&question, contender, RecallScope::Session, &assembly)
                    .await?;
                judged.insert(contender, judgement);
            }
            let full_history = judged[&Contender::FullHistory].tokens;
            for max_turns in TRADE_OFF_WINDOWS {
                let assembly = self
                    .assemble_windowed(thread, max_turns, case.probe.query)
                    .await?;
                let judgement = score(&case.probe, &assembly);
                let tally = self.windows.entry(max_turns).or_default();
                tally.suite_found += usize::from(judgement.verdict == Verdict::Found);
                tally
                    .suite_shares
                    .push(share(judgement.tokens, full_history));
            }
            results.push(CaseResult {
                kind: case.kind,
                depth: case.depth,
                source: case.source,
                plant_turn: case.plant_turn,
                stored: stored(&messages, &case.probe),
                probe: case.probe.clone(),
                results: judged,
            });
        }
        Ok(SuiteResult::new(results))
    }

    /// A preference stated in one session, asked about in the user's next session: every
    /// strategy over the second session, and the combined strategy once recalling from the
    /// session (as `/context` does) and once from all of the user's sessions.
    async fn cross_session(&mut self) -> anyhow::Result<CrossSessionResult> {
        let script = script::cross_session();
        let first = Thread::new("returning-first", "returning-user");
        let second = Thread::new("returning-second", "returning-user");
        let as_messages = |turns: &[script::Exchange]| -> Vec<(Role, String)> {
            turns
                .iter()
                .flat_map(|e| {
                    [
                        (Role::User, e.user.clone()),
                        (Role::Assistant, e.assistant.clone()),
                    ]
                })
                .collect()
        };
        let earlier = as_messages(&script.first);
        let mut later = as_messages(&script.second);
        later.push((Role::User, script.probe.query.to_owned()));
        self.append(&first, earlier).await?;
        self.append(&second, later).await?;
        self.settle().await?;
        let previous = self.messages(&first)?;
        let messages = self.messages(&second)?;
        let earlier_sessions = [(first.session.as_str(), previous.as_slice())];
        let mut rows = Vec::new();
        let runs = CONTENDERS
            .iter()
            .map(|&contender| (contender, RecallScope::Session))
            .chain([(Contender::Combined, RecallScope::User)]);
        for (contender, scope) in runs {
            let assembly = self
                .assemble(&second, contender, scope, script.probe.query)
                .await?;
            let at = match (contender, scope) {
                (Contender::Combined, RecallScope::User) => "cross-session, user-scope recall",
                (Contender::Combined, RecallScope::Session) => {
                    "cross-session, session-scope recall"
                }
                _ => "cross-session",
            };
            let question = Question {
                at: at.to_owned(),
                thread: &second,
                messages: &messages,
                earlier_sessions: &earlier_sessions,
                probe: &script.probe,
            };
            let judgement = self.judge(&question, contender, scope, &assembly).await?;
            rows.push(CrossRow {
                strategy: contender,
                recall_scope: (contender == Contender::Combined).then_some(scope_name(scope)),
                judgement,
            });
        }
        Ok(CrossSessionResult {
            first_session_turns: script.first.len(),
            plant_turn: script.plant_turn,
            second_session_turns: script.second.len() + 1,
            stored: stored(&previous, &script.probe),
            probe: script.probe,
            rows,
        })
    }

    async fn append(
        &mut self,
        thread: &Thread,
        messages: Vec<(Role, impl Into<String>)>,
    ) -> anyhow::Result<()> {
        let count = messages.len();
        let messages = messages
            .into_iter()
            .map(|(role, content)| {
                let content = content.into();
                NewMessage {
                    role,
                    token_count: ENCODING.count(&content),
                    content,
                    timestamp: None,
                    metadata: Metadata::new(),
                }
            })
            .collect();
        let append = Append {
            messages,
            create: Some(NewSession {
                user_id: thread.user.clone(),
                agent_id: AGENT.into(),
                flow_id: None,
                metadata: Metadata::new(),
            }),
            idempotency_key: None,
        };
        self.stack
            .store
            .sessions()
            .append(&Access::tenant_wide(TENANT), &thread.session, append)
            .await
            .with_context(|| format!("cannot append to {}", thread.session))?;
        self.appended += count;
        Ok(())
    }

    /// Waits until every appended message is embedded, so recall answers from both indexes.
    async fn settle(&self) -> anyhow::Result<()> {
        self.stack.wait_until_embedded(self.appended).await
    }

    /// The session as the store holds it: what `/context` reads.
    fn messages(&self, thread: &Thread) -> anyhow::Result<Vec<Message>> {
        Ok(self.stack.store.sessions().messages(
            &Access::tenant_wide(TENANT),
            &thread.session,
            0,
            usize::MAX,
        )?)
    }

    /// The context `/context` builds for `query` with the contender's settings.
    async fn assemble(
        &self,
        thread: &Thread,
        contender: Contender,
        scope: RecallScope,
        query: &str,
    ) -> anyhow::Result<Assembly> {
        let mut settings = contender.settings(self.context_window);
        settings.recall_scope = scope;
        self.assemble_with(thread, &settings, query).await
    }

    /// The combined strategy's context for `query` with its window set to `max_turns`
    /// exchanges, for the trade-off table.
    async fn assemble_windowed(
        &self,
        thread: &Thread,
        max_turns: usize,
        query: &str,
    ) -> anyhow::Result<Assembly> {
        let settings = ContextSettings {
            max_turns: Some(max_turns),
            ..Contender::Combined.settings(self.context_window)
        };
        self.assemble_with(thread, &settings, query).await
    }

    /// The context `/context` builds for `query` with `settings` as the request's.
    async fn assemble_with(
        &self,
        thread: &Thread,
        settings: &ContextSettings,
        query: &str,
    ) -> anyhow::Result<Assembly> {
        let serde_json::Value::Object(overrides) = serde_json::to_value(settings)? else {
            anyhow::bail!("settings serialise to a JSON object");
        };
        let built = self
            .stack
            .contexts
            .build(ContextRequest {
                access: Access::tenant_wide(TENANT),
                session_id: thread.session.clone(),
                query: Some(query.to_owned()),
                overrides,
            })
            .await?;
        if let Some(reason) = built.recall_degraded {
            anyhow::bail!("recall answered degraded although every message was embedded: {reason}");
        }
        let text = match render(&built.assembled.messages, OutputFormat::Text) {
            Rendered::Text { text } => text,
            _ => unreachable!("the text format renders one text"),
        };
        Ok(Assembly {
            assembled: built.assembled,
            text,
            recalled: built.recalled,
        })
    }

    /// The `k` best messages recall finds for `query` outside the combined strategy's
    /// window: what a context would get if it could take `k` of them.
    async fn recall_outside_window(
        &self,
        thread: &Thread,
        scope: RecallScope,
        query: &str,
        k: usize,
    ) -> anyhow::Result<Vec<RecalledMessage>> {
        let settings = ContextSettings {
            recall_k: k,
            recall_scope: scope,
            ..Contender::Combined.settings(self.context_window)
        };
        let (hits, _) = self
            .stack
            .contexts
            .recall_outside_window(
                &Access::tenant_wide(TENANT),
                &thread.session,
                query.to_owned(),
                &settings,
            )
            .await?;
        Ok(hits)
    }

    /// Scores one context and, for a miss of the combined strategy, records its cause.
    async fn judge(
        &mut self,
        question: &Question<'_>,
        contender: Contender,
        scope: RecallScope,
        assembly: &Assembly,
    ) -> anyhow::Result<Judgement> {
        let probe = question.probe;
        let judgement = score(probe, assembly);
        if contender == Contender::Combined && judgement.verdict != Verdict::Found {
            let cause = self.diagnose(question, scope, assembly, &judgement).await?;
            self.misses.push(Miss {
                at: question.at.clone(),
                fact: probe.fact,
                expected: probe.expected,
                verdict: judgement.verdict,
                cause,
            });
        }
        Ok(judgement)
    }

    /// Why the combined strategy's context lacks the fact (or lets a stale value stand),
    /// layer by layer: entity memory, recall, and the packing of what both brought.
    async fn diagnose(
        &self,
        question: &Question<'_>,
        scope: RecallScope,
        assembly: &Assembly,
        judgement: &Judgement,
    ) -> anyhow::Result<String> {
        let Question {
            thread,
            messages,
            earlier_sessions,
            probe,
            ..
        } = *question;
        if judgement.verdict == Verdict::Stale {
            let stale = probe.stale.unwrap_or_default();
            let standing: Vec<String> = assembly
                .assembled
                .messages
                .iter()
                .filter(|piece| stands_uncorrected(piece, probe.expected, stale))
                .map(|piece| format!("{}: {:?}", layer_name(piece.layer), piece.content))
                .collect();
            return Ok(format!(
                "stale: the old value {stale:?} stands uncorrected in {}",
                standing.join("; ")
            ));
        }
        // The message that first states the value, the question itself excepted.
        let query_index = messages.last().map(|m| m.index);
        let candidates = earlier_sessions
            .iter()
            .flat_map(|(session, list)| list.iter().map(move |m| (*session, m)))
            .chain(
                messages
                    .iter()
                    .filter(|m| Some(m.index) != query_index)
                    .map(|m| (thread.session.as_str(), m)),
            );
        let Some((session, source)) = candidates
            .into_iter()
            .find(|(_, m)| contains(&m.content, probe.expected))
        else {
            return Ok("storage: no stored message states the value".into());
        };
        let here = session == thread.session;
        let name = if here {
            format!("#{}", source.index)
        } else {
            format!("#{} of session {session}", source.index)
        };
        let mut causes = Vec::new();

        let sheet = FactSheet::from_messages(messages);
        causes.push(if !here {
            format!(
                "facts: stated in session {session}; entity memory reads the current session only"
            )
        } else if source.role != Role::User {
            format!(
                "facts: stated by the assistant ({name}); entity memory reads user messages only"
            )
        } else if let Some((key, entry)) = sheet
            .entries()
            .iter()
            .find(|(_, entry)| contains(&entry.value, probe.expected))
        {
            format!(
                "facts: known as `{key}: {}`, but the facts block did not fit the budget",
                entry.value
            )
        } else {
            let read = extract(source);
            if read.is_empty() {
                format!(
                    "facts: the extractor read nothing from {name} {:?}",
                    source.content
                )
            } else if let Some(fact) = read.iter().find(|f| contains(&f.value, probe.expected)) {
                let now = &sheet.entries()[&fact.key];
                format!(
                    "facts: read `{}: {}` from {name}, then replaced by `{}: {}` from #{}",
                    fact.key, fact.value, fact.key, now.value, now.source
                )
            } else {
                let read: Vec<String> = read
                    .iter()
                    .map(|f| format!("`{}: {}`", f.key, f.value))
                    .collect();
                format!(
                    "facts: from {name} {:?} the extractor read only {}",
                    source.content,
                    read.join(", ")
                )
            }
        });

        // Recall may bring any message stating the value, an assistant's echo included.
        let states = |hit: &RecalledMessage| contains(&hit.message.content, probe.expected);
        let label = |hit: &RecalledMessage| {
            let session = if hit.current_session {
                String::new()
            } else {
                format!(" of session {}", hit.session_id)
            };
            format!(
                "#{}{session} ({})",
                hit.message.index,
                role_name(hit.message.role)
            )
        };
        causes.push(if !here && scope == RecallScope::Session {
            "recall: searched the current session only (`recall_scope: session`)".into()
        } else if let Some(hit) = assembly.recalled.iter().find(|hit| states(hit)) {
            format!(
                "assembly: recall returned {}, but it did not fit the budget",
                label(hit)
            )
        } else {
            let deep = self
                .recall_outside_window(thread, scope, probe.query, DIAGNOSIS_DEPTH)
                .await?;
            let ranks: Vec<String> = deep
                .iter()
                .enumerate()
                .filter(|(_, hit)| states(hit))
                .map(|(rank, hit)| format!("{} at rank {}", label(hit), rank + 1))
                .collect();
            let found = if ranks.is_empty() {
                "none of them".to_owned()
            } else {
                ranks.join(", ")
            };
            format!(
                "recall: no message stating it among the {RECALL_K} hits; asked for \
                 {DIAGNOSIS_DEPTH}, it returns {found} (the statement is {name})"
            )
        });
        Ok(causes.join("; "))
    }
}

/// Adds one strategy's judgement to the result of the question asked at `turn`.
fn record(
    probes: &mut Vec<ProbeResult>,
    turn: usize,
    probe: &Probe,
    messages: &[Message],
    contender: Contender,
    judgement: Judgement,
) {
    if probes.last().is_none_or(|last| last.turn != turn) {
        probes.push(ProbeResult {
            turn,
            stored: stored(messages, probe),
            probe: probe.clone(),
            results: BTreeMap::new(),
        });
    }
    if let Some(last) = probes.last_mut() {
        last.results.insert(contender, judgement);
    }
}

/// Whether the store holds a message stating the value (the question excepted).
fn stored(messages: &[Message], probe: &Probe) -> bool {
    messages
        .iter()
        .any(|m| m.content != probe.query && contains(&m.content, probe.expected))
}

fn scope_name(scope: RecallScope) -> &'static str {
    match scope {
        RecallScope::Session => "session",
        RecallScope::User => "user",
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

fn layer_name(layer: Layer) -> &'static str {
    match layer {
        Layer::Instructions => "instructions",
        Layer::Facts => "facts",
        Layer::Memories => "memories",
        Layer::Lessons => "lessons",
        Layer::SessionMemory => "session_memory",
        Layer::Summary => "summary",
        Layer::Retrieved => "retrieved",
        Layer::EarlierQuestions => "earlier_questions",
        Layer::Window => "window",
    }
}

/// Case-insensitive containment, as a reader (or a model) would match a value.
fn contains(text: &str, value: &str) -> bool {
    text.to_lowercase().contains(&value.to_lowercase())
}

/// Scores a context: the expected value must appear in the rendered text, and for a
/// correction the old value must not stand uncorrected.
fn score(probe: &Probe, assembly: &Assembly) -> Judgement {
    let pieces = &assembly.assembled.messages;
    let mut found_in: Vec<Layer> = Vec::new();
    for piece in pieces {
        if contains(&piece.content, probe.expected) && !found_in.contains(&piece.layer) {
            found_in.push(piece.layer);
        }
    }
    let verdict = if !contains(&assembly.text, probe.expected) {
        Verdict::Missing
    } else if probe
        .stale
        .is_some_and(|stale| stale_stands(pieces, probe.expected, stale))
    {
        Verdict::Stale
    } else {
        Verdict::Found
    };
    let report = &assembly.assembled.report;
    Judgement {
        verdict,
        found_in,
        tokens: report.total_tokens,
        layers: report.layers.clone(),
    }
}

/// Words that mark a line as stating a correction.
const CORRECTION_CUES: &[&str] = &[
    "actually",
    "corrected",
    "correction",
    "not",
    "instead",
    "wrong",
    "earlier",
    "misspelled",
];

/// Whether a line marks `stale` as corrected: the corrected value comes first and a
/// correction cue says the other one is superseded ("Thursday, not Tuesday"; the facts
/// block's "Alice (corrected; earlier: Alicia)").
fn marks_correction(line: &str, expected: &str, stale: &str) -> bool {
    let line = line.to_lowercase();
    let Some(at) = line.find(&stale.to_lowercase()) else {
        return false;
    };
    line[..at].contains(&expected.to_lowercase())
        && line
            .split(|c: char| !c.is_alphanumeric())
            .any(|word| CORRECTION_CUES.contains(&word))
}

/// Whether a piece states the old value without marking it corrected.
fn stands_uncorrected(piece: &ContextMessage, expected: &str, stale: &str) -> bool {
    piece
        .content
        .lines()
        .any(|line| contains(line, stale) && !marks_correction(line, expected, stale))
}

/// Whether the old value stands in a context: as a known fact (the facts block is the
/// context's authority), or anywhere while nothing in the context marks it corrected. An
/// old message stating it is fine when the correction is in the context too, as it is in
/// a full history.
fn stale_stands(pieces: &[ContextMessage], expected: &str, stale: &str) -> bool {
    let lines = || {
        pieces
            .iter()
            .flat_map(|piece| piece.content.lines().map(move |line| (piece.layer, line)))
    };
    let mentioned = lines().any(|(_, line)| contains(line, stale));
    let marked = lines().any(|(_, line)| marks_correction(line, expected, stale));
    let stated_as_fact = lines().any(|(layer, line)| {
        layer == Layer::Facts && contains(line, stale) && !marks_correction(line, expected, stale)
    });
    stated_as_fact || (mentioned && !marked)
}

#[cfg(test)]
mod tests;
