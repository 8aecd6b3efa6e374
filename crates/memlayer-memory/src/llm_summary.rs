//! The model-backed summariser: older turns condensed by a chat model behind an
//! OpenAI-compatible endpoint (a hosted API, or llama.cpp, vLLM or Ollama on the same host).
//!
//! The model is told what a summary must never lose, and it is given the facts extracted by
//! rule beside the transcript, so a correction it might overlook is spelled out. Its answer is
//! checked before it is trusted: an empty answer or one over the token limit is a failure, and
//! the caller falls back to the extractive summariser.

use memlayer_llm::{ChatClient, ChatRequest, Message as ChatMessage};
use memlayer_store::Role;

use crate::MemoryError;
use crate::summary::{SUMMARY_MARKER, Summarizer, Summary, SummaryFuture, SummaryRequest};

/// What the model is asked to do. Kept in one place so a change to the product's promise
/// (what a summary keeps) is a change to one string.
const INSTRUCTIONS: &str = "You maintain the running summary of a conversation between a \
user and an assistant, so that the assistant can continue it without the older turns. \
Write a concise summary in plain sentences. Preserve every name, number, identifier, date, \
stated preference, decision and correction. When a value was corrected, keep only the \
corrected value and say it was corrected. Do not invent anything, do not address the user, \
and answer with the summary only.";

/// Summarises with a chat model.
#[derive(Debug, Clone)]
pub struct LlmSummarizer {
    client: ChatClient,
}

impl LlmSummarizer {
    /// A summariser calling the endpoint `client` is configured for.
    pub fn new(client: ChatClient) -> Self {
        Self { client }
    }

    async fn run(&self, request: SummaryRequest<'_>) -> Result<Summary, MemoryError> {
        let first_index = request
            .previous
            .map(|p| p.first_index)
            .or_else(|| request.messages.first().map(|m| m.index))
            .ok_or(MemoryError::NothingToSummarize)?;
        let last_index = request
            .messages
            .last()
            .map(|m| m.index)
            .ok_or(MemoryError::NothingToSummarize)?;
        let header = format!("{SUMMARY_MARKER} (messages {first_index}–{last_index})");
        let budget = request
            .max_tokens
            .saturating_sub(request.encoding.count(&header) + 1);
        let mut chat = ChatRequest::new(vec![
            ChatMessage::system(format!("{INSTRUCTIONS} Use at most {budget} tokens.")),
            ChatMessage::user(prompt(&request)),
        ]);
        chat.max_tokens = Some(budget);
        let completion = self.client.complete(&chat).await.map_err(|err| {
            // The details are the operator's; the reason goes back to the client.
            tracing::warn!(error = %err.for_log(), "the summarising model failed");
            MemoryError::Summarizer {
                reason: err.public_reason(),
                source: Some(err),
            }
        })?;
        let body = completion.content.unwrap_or_default();
        let body = body.trim();
        if body.is_empty() {
            return Err(MemoryError::Summarizer {
                reason: "the model answered with an empty summary".into(),
                source: None,
            });
        }
        let text = format!("{header}\n{body}");
        let tokens = request.encoding.count(&text);
        if tokens > request.max_tokens {
            return Err(MemoryError::Summarizer {
                reason: format!(
                    "the model's summary has {tokens} tokens, over the limit of {}",
                    request.max_tokens
                ),
                source: None,
            });
        }
        Ok(Summary {
            text,
            first_index,
            last_index,
        })
    }
}

impl Summarizer for LlmSummarizer {
    fn name(&self) -> &'static str {
        "llm"
    }

    fn summarize<'a>(&'a self, request: SummaryRequest<'a>) -> SummaryFuture<'a> {
        Box::pin(self.run(request))
    }
}

/// The user message: the summary so far, the facts in force, and the turns to fold in.
fn prompt(request: &SummaryRequest<'_>) -> String {
    let mut out = String::new();
    if let Some(previous) = request.previous {
        out.push_str("Summary so far:\n");
        out.push_str(previous.text.trim_start_matches(SUMMARY_MARKER).trim());
        out.push_str("\n\n");
    }
    if let Some(facts) = request.facts.render() {
        out.push_str(&facts);
        out.push_str("\n\n");
    }
    out.push_str("Turns to add to the summary:\n");
    for message in request.messages {
        let speaker = match message.role {
            Role::User => "User",
            Role::Assistant => "Assistant",
            Role::Tool => "Tool",
            Role::System => continue,
        };
        out.push_str(&format!("{speaker}: {}\n", message.content));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use memlayer_llm::{FakeUpstream, Reply};
    use memlayer_store::{Message, Timestamp};

    use super::*;
    use crate::entities::FactSheet;
    use crate::tokens::TokenEncoding;

    fn messages() -> Vec<Message> {
        [
            (Role::User, "My name is Alicia and my order is 5521."),
            (Role::Assistant, "Thanks Alicia."),
            (Role::User, "Actually, my name is Alice, not Alicia."),
        ]
        .iter()
        .enumerate()
        .map(|(i, (role, content))| Message {
            index: i as u64 + 10,
            role: *role,
            content: (*content).to_owned(),
            timestamp: Timestamp::from_micros(0),
            token_count: 0,
            metadata: Default::default(),
        })
        .collect()
    }

    async fn summarize(upstream: &FakeUpstream, max_tokens: u32) -> Result<Summary, MemoryError> {
        let mut config = upstream.config();
        config.timeout = Duration::from_millis(500);
        let summarizer = LlmSummarizer::new(ChatClient::new(config).unwrap());
        let messages = messages();
        let previous = Summary {
            text: format!("{SUMMARY_MARKER} (messages 0–9)\nThe user wants a refund."),
            first_index: 0,
            last_index: 9,
        };
        summarizer
            .summarize(SummaryRequest {
                previous: Some(&previous),
                messages: &messages,
                facts: &FactSheet::from_messages(&messages),
                max_tokens,
                encoding: TokenEncoding::Cl100kBase,
            })
            .await
    }

    #[tokio::test]
    async fn sends_the_summary_so_far_facts_and_turns_and_marks_the_answer() {
        let upstream = FakeUpstream::start().await;
        upstream.push(Reply::text(
            "Alice (name corrected from Alicia) wants a refund for order 5521.",
        ));
        let summary = summarize(&upstream, 200).await.unwrap();
        assert_eq!((summary.first_index, summary.last_index), (0, 12));
        assert_eq!(
            summary.text,
            "[Conversation Summary] (messages 0–12)\n\
             Alice (name corrected from Alicia) wants a refund for order 5521."
        );
        let sent = &upstream.requests()[0].body;
        let prompt = sent["messages"][1]["content"].as_str().unwrap();
        assert!(prompt.contains("Summary so far:\n(messages 0–9)\nThe user wants a refund."));
        assert!(prompt.contains("- name: Alice (corrected; earlier: Alicia)"));
        assert!(prompt.contains("User: Actually, my name is Alice, not Alicia."));
        assert!(sent["max_tokens"].as_u64().unwrap() < 200);
    }

    #[tokio::test]
    async fn failures_and_unusable_answers_are_errors_for_the_fallback() {
        let upstream = FakeUpstream::start().await;
        upstream.push(Reply::error(503, "overloaded", "server_error", None));
        upstream.push(Reply::text("   "));
        upstream.push(Reply::text(&"word ".repeat(400)));
        upstream.push(Reply::text("late").after(Duration::from_secs(2)));
        // The reasons reach clients (`fallback_reason`): what failed, not what the model said.
        for expected in [
            "the model upstream answered 503",
            "empty summary",
            "over the limit",
            "the model did not answer in time",
        ] {
            let err = summarize(&upstream, 200).await.unwrap_err().to_string();
            assert!(err.contains(expected), "{err} should mention {expected}");
        }
    }
}
