//! Assembled context and its output formats: OpenAI chat `messages`, Anthropic `system` +
//! `messages`, and plain text. Every piece of context says which layer it came from and
//! which stored messages it stands for, so a report can explain the prompt.

use memlayer_store::Role;
use serde::Serialize;

use crate::history::{Exchange, MESSAGE_OVERHEAD_TOKENS};
use crate::tokens::TokenEncoding;

/// The memory layer a piece of context comes from, in the order they appear in a prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    /// The session's own system messages (instructions). Never dropped.
    Instructions,
    /// Facts from entity memory (`Known facts:`).
    Facts,
    /// The user's long-term memories relevant to the query (`Long-term memories:`).
    Memories,
    /// Lessons from the user's earlier episodes (`Lessons from earlier tasks:`).
    Lessons,
    /// The rolling summary of the user's earlier conversations with the agent.
    SessionMemory,
    /// The rolling summary of older turns (`[Conversation Summary]`).
    Summary,
    /// Older messages recalled for the current query (`Relevant earlier messages:`).
    Retrieved,
    /// Older questions kept as stubs by history depth (`[earlier question] (turn N): …`).
    EarlierQuestions,
    /// Recent exchanges, in full.
    Window,
}

/// One message of assembled context.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextMessage {
    /// The role it is sent with.
    pub role: Role,
    /// Its text.
    pub content: String,
    /// Where it came from.
    pub layer: Layer,
    /// For window messages, the user turn they belong to (1-based); used by the text format.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn: Option<u64>,
    /// Indices of the stored messages it stands for.
    pub sources: Vec<u64>,
    /// Tokens it costs in a prompt, overhead included.
    pub tokens: u32,
}

impl ContextMessage {
    /// A generated message (facts, summary, stubs), its tokens counted with `encoding`.
    pub fn generated(
        layer: Layer,
        content: String,
        sources: Vec<u64>,
        encoding: TokenEncoding,
    ) -> Self {
        let tokens = encoding.count(&content) + MESSAGE_OVERHEAD_TOKENS;
        Self {
            role: Role::System,
            content,
            layer,
            turn: None,
            sources,
            tokens,
        }
    }

    /// The messages of an exchange, as they were stored.
    pub fn from_exchange(exchange: &Exchange<'_>) -> impl Iterator<Item = Self> {
        let turn = (exchange.turn > 0).then_some(exchange.turn);
        exchange.messages.iter().map(move |message| Self {
            role: message.role,
            content: message.content.clone(),
            layer: Layer::Window,
            turn,
            sources: vec![message.index],
            tokens: crate::history::message_tokens(message),
        })
    }
}

/// The history-depth stubs for exchanges outside the window: each question alone, its
/// answer omitted; `None` when no older exchange has a question.
pub fn earlier_questions(
    older: &[Exchange<'_>],
    encoding: TokenEncoding,
) -> Option<ContextMessage> {
    let mut lines = Vec::new();
    let mut sources = Vec::new();
    for exchange in older {
        if let Some(question) = exchange.question() {
            lines.push(format!(
                "[earlier question] (turn {}): {}",
                exchange.turn, question.content
            ));
            sources.push(question.index);
        }
    }
    (!lines.is_empty()).then(|| {
        ContextMessage::generated(Layer::EarlierQuestions, lines.join("\n"), sources, encoding)
    })
}

/// `title` and then as many of `lines` (each with the id it stands for), in order, as fit
/// `max_tokens` together, one per line; with the ids of the lines included. `None` when not
/// even the first line fits.
pub(crate) fn capped_list(
    title: &str,
    lines: impl IntoIterator<Item = (u64, String)>,
    max_tokens: u32,
    encoding: TokenEncoding,
) -> Option<(String, Vec<u64>)> {
    let mut text = title.to_owned();
    let mut used = encoding.count(&text);
    let mut ids = Vec::new();
    for (id, line) in lines {
        let line = format!("\n{line}");
        let cost = encoding.count(&line);
        if used + cost > max_tokens {
            break;
        }
        used += cost;
        text.push_str(&line);
        ids.push(id);
    }
    (!ids.is_empty()).then_some((text, ids))
}

/// How the assembled context is handed to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputFormat {
    /// OpenAI chat completions: `messages: [{role, content}]`.
    #[default]
    Openai,
    /// Anthropic messages: a `system` string and alternating `user`/`assistant` messages.
    Anthropic,
    /// One plain-text transcript.
    Text,
}

/// A message of the OpenAI or Anthropic shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool` (OpenAI); `user` or `assistant` (Anthropic).
    pub role: &'static str,
    /// The text.
    pub content: String,
}

/// Context rendered in one of the [`OutputFormat`]s.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Rendered {
    /// OpenAI chat messages.
    Openai {
        /// The messages, system messages first.
        messages: Vec<ChatMessage>,
    },
    /// Anthropic's split: one system prompt and alternating turns.
    Anthropic {
        /// Every system-role piece, joined by blank lines.
        system: String,
        /// Alternating user/assistant messages, starting with a user message.
        messages: Vec<ChatMessage>,
    },
    /// A transcript.
    Text {
        /// The whole context as one string.
        text: String,
    },
}

pub(crate) fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// Renders assembled context (already in prompt order) in `format`.
pub fn render(context: &[ContextMessage], format: OutputFormat) -> Rendered {
    match format {
        OutputFormat::Openai => Rendered::Openai {
            messages: context
                .iter()
                .map(|m| ChatMessage {
                    role: role_name(m.role),
                    content: m.content.clone(),
                })
                .collect(),
        },
        OutputFormat::Anthropic => render_anthropic(context),
        OutputFormat::Text => Rendered::Text {
            text: render_text(context),
        },
    }
}

/// Anthropic takes system text separately and requires turns that alternate, starting with
/// the user: tool output is sent as user text, and consecutive same-role pieces are merged.
fn render_anthropic(context: &[ContextMessage]) -> Rendered {
    let mut system = Vec::new();
    let mut messages: Vec<ChatMessage> = Vec::new();
    for message in context {
        let (role, content) = match message.role {
            Role::System => {
                system.push(message.content.as_str());
                continue;
            }
            Role::User => ("user", message.content.clone()),
            Role::Tool => ("user", format!("[tool output]\n{}", message.content)),
            Role::Assistant => ("assistant", message.content.clone()),
        };
        match messages.last_mut() {
            Some(last) if last.role == role => {
                last.content.push_str("\n\n");
                last.content.push_str(&content);
            }
            None if role == "assistant" => {
                // Anthropic rejects a conversation that opens with the assistant.
                messages.push(ChatMessage {
                    role: "user",
                    content: "(conversation continues)".into(),
                });
                messages.push(ChatMessage { role, content });
            }
            _ => messages.push(ChatMessage { role, content }),
        }
    }
    Rendered::Anthropic {
        system: system.join("\n\n"),
        messages,
    }
}

/// The transcript form the history-depth setting is documented in:
/// `User (turn N): …` / `Assistant: …`, generated layers as they are.
fn render_text(context: &[ContextMessage]) -> String {
    context
        .iter()
        .map(|m| match (m.layer, m.role) {
            (Layer::Window, Role::User) => match m.turn {
                Some(turn) => format!("User (turn {turn}): {}", m.content),
                None => format!("User: {}", m.content),
            },
            (Layer::Window, Role::Assistant) => format!("Assistant: {}", m.content),
            (Layer::Window, Role::Tool) => format!("Tool: {}", m.content),
            _ => m.content.clone(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};
    use memlayer_store::{Message, Role, Timestamp};

    use super::*;
    use crate::history::{History, Window};

    fn conversation(turns: &[(Role, &str)]) -> Vec<Message> {
        turns
            .iter()
            .enumerate()
            .map(|(i, (role, content))| Message {
                index: i as u64,
                role: *role,
                content: (*content).to_owned(),
                timestamp: Timestamp::from_micros(0),
                token_count: TokenEncoding::Cl100kBase.count(content),
                metadata: Default::default(),
            })
            .collect()
    }

    /// History depth 2 over a four-turn conversation, rendered in `format`.
    fn check(format: OutputFormat, expected: Expect) {
        let messages = conversation(&[
            (Role::System, "You are a travel assistant."),
            (Role::User, "Book me a flight to Lisbon."),
            (Role::Assistant, "Booked: TP 1351 on 12 May."),
            (Role::User, "And a hotel?"),
            (Role::Assistant, "Hotel Avenida, 3 nights."),
            (Role::User, "What is the weather there?"),
            (Role::Assistant, "Sunny, 24 °C."),
            (Role::User, "Thanks! Which terminal?"),
            (Role::Tool, "{\"terminal\": 1}"),
            (Role::Assistant, "Terminal 1."),
        ]);
        let history = History::new(&messages);
        let window = Window::last_turns(&history, 2);
        let mut context: Vec<ContextMessage> = history
            .system
            .iter()
            .map(|m| ContextMessage {
                role: Role::System,
                content: m.content.clone(),
                layer: Layer::Instructions,
                turn: None,
                sources: vec![m.index],
                tokens: crate::history::message_tokens(m),
            })
            .collect();
        context.extend(earlier_questions(&window.older, TokenEncoding::Cl100kBase));
        context.extend(window.recent.iter().flat_map(ContextMessage::from_exchange));
        let rendered = serde_json::to_string_pretty(&render(&context, format)).unwrap();
        expected.assert_eq(&rendered);
    }

    #[test]
    fn history_depth_as_plain_text() {
        check(
            OutputFormat::Text,
            expect![[r#"
                {
                  "text": "You are a travel assistant.\n[earlier question] (turn 1): Book me a flight to Lisbon.\n[earlier question] (turn 2): And a hotel?\nUser (turn 3): What is the weather there?\nAssistant: Sunny, 24 °C.\nUser (turn 4): Thanks! Which terminal?\nTool: {\"terminal\": 1}\nAssistant: Terminal 1."
                }"#]],
        );
    }

    #[test]
    fn history_depth_as_openai_messages() {
        check(
            OutputFormat::Openai,
            expect![[r#"
                {
                  "messages": [
                    {
                      "role": "system",
                      "content": "You are a travel assistant."
                    },
                    {
                      "role": "system",
                      "content": "[earlier question] (turn 1): Book me a flight to Lisbon.\n[earlier question] (turn 2): And a hotel?"
                    },
                    {
                      "role": "user",
                      "content": "What is the weather there?"
                    },
                    {
                      "role": "assistant",
                      "content": "Sunny, 24 °C."
                    },
                    {
                      "role": "user",
                      "content": "Thanks! Which terminal?"
                    },
                    {
                      "role": "tool",
                      "content": "{\"terminal\": 1}"
                    },
                    {
                      "role": "assistant",
                      "content": "Terminal 1."
                    }
                  ]
                }"#]],
        );
    }

    #[test]
    fn history_depth_as_anthropic_messages() {
        check(
            OutputFormat::Anthropic,
            expect![[r#"
                {
                  "system": "You are a travel assistant.\n\n[earlier question] (turn 1): Book me a flight to Lisbon.\n[earlier question] (turn 2): And a hotel?",
                  "messages": [
                    {
                      "role": "user",
                      "content": "What is the weather there?"
                    },
                    {
                      "role": "assistant",
                      "content": "Sunny, 24 °C."
                    },
                    {
                      "role": "user",
                      "content": "Thanks! Which terminal?\n\n[tool output]\n{\"terminal\": 1}"
                    },
                    {
                      "role": "assistant",
                      "content": "Terminal 1."
                    }
                  ]
                }"#]],
        );
    }
}
