//! The offline extractive summariser: condenses older turns into one
//! `[Conversation Summary]` message without a model, deterministically.
//!
//! It keeps what a conversation cannot afford to lose — every stated fact (through
//! [`FactSheet`], so a corrected value replaces the old one), and every sentence that carries
//! a number, an identifier, a name, a date, a preference or a decision — and drops small
//! talk. Sentences that state a value later corrected are dropped too, so the summary never
//! contradicts itself; the correction itself is kept.

use std::future::Future;
use std::pin::Pin;
use std::sync::LazyLock;

use memlayer_store::{Message, Role};
use regex::Regex;

use crate::MemoryError;
use crate::entities::FactSheet;
use crate::tokens::TokenEncoding;

/// The marker the summary message starts with.
pub const SUMMARY_MARKER: &str = "[Conversation Summary]";

/// A summary of a range of a session's messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The text, starting with [`SUMMARY_MARKER`].
    pub text: String,
    /// Index of the first message it covers.
    pub first_index: u64,
    /// Index of the last message it covers.
    pub last_index: u64,
}

/// What a summariser is asked to condense.
#[derive(Debug, Clone, Copy)]
pub struct SummaryRequest<'a> {
    /// The summary so far, which the new one continues and replaces.
    pub previous: Option<&'a Summary>,
    /// The messages to fold in, oldest first; never empty.
    pub messages: &'a [Message],
    /// Every fact stated up to the last of `messages` (not only in them), corrections
    /// applied: what the summary must carry whatever it drops.
    pub facts: &'a FactSheet,
    /// The longest the summary may be.
    pub max_tokens: u32,
    /// How its tokens are counted.
    pub encoding: TokenEncoding,
}

/// A summariser's answer, arriving when it is done.
pub type SummaryFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Summary, MemoryError>> + Send + 'a>>;

/// Condenses older turns into one `[Conversation Summary]` message. Implementations: the
/// offline [`ExtractiveSummarizer`] (the default) and a model behind an OpenAI-compatible
/// endpoint.
pub trait Summarizer: Send + Sync {
    /// A short name for reports (`extractive`, `llm`).
    fn name(&self) -> &'static str;

    /// Summarises `request.messages`, continuing `request.previous`.
    fn summarize<'a>(&'a self, request: SummaryRequest<'a>) -> SummaryFuture<'a>;
}

/// The offline, deterministic summariser: [`summarize_extractive`] behind [`Summarizer`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ExtractiveSummarizer;

impl Summarizer for ExtractiveSummarizer {
    fn name(&self) -> &'static str {
        "extractive"
    }

    fn summarize<'a>(&'a self, request: SummaryRequest<'a>) -> SummaryFuture<'a> {
        Box::pin(std::future::ready(
            summarize_extractive(request).ok_or(MemoryError::NothingToSummarize),
        ))
    }
}

static SALIENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?i)(\d",
        r"|\b(?:decid|agree|confirm|book|schedul|chose|choose|plan|will|going to|let's|deadline|due",
        r"|prefer|like|love|hate|want|need|allerg|favou?rite|always|never|remember|important",
        r"|actually|correction|instead|not\b|my name|call me|email|phone|address)\w*)",
    ))
    .expect("the pattern is valid")
});
static PROPER_NOUN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\S\s+[A-Z][a-z]+").expect("the pattern is valid"));
static SENTENCE_END: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?:[.!?]+|\n+)\s*").expect("the pattern is valid"));

/// Sentences of `text`, trimmed, without empty ones.
fn sentences(text: &str) -> impl Iterator<Item = &str> {
    let mut start = 0;
    let mut out = Vec::new();
    for end in SENTENCE_END.find_iter(text) {
        out.push(text[start..end.end()].trim());
        start = end.end();
    }
    out.push(text[start..].trim());
    out.into_iter().filter(|s| !s.is_empty())
}

/// Summarises `request.messages` (oldest first) into at most `request.max_tokens` tokens,
/// continuing from a previous summary when the conversation was summarised before. Returns
/// `None` when there is nothing to summarise.
pub fn summarize_extractive(request: SummaryRequest<'_>) -> Option<Summary> {
    let SummaryRequest {
        previous,
        messages,
        facts,
        max_tokens,
        encoding,
    } = request;
    let first_index = previous
        .map(|p| p.first_index)
        .or_else(|| messages.first().map(|m| m.index))?;
    let last_index = messages
        .last()
        .map(|m| m.index)
        .or_else(|| previous.map(|p| p.last_index))?;
    let stale: Vec<String> = facts
        .entries()
        .values()
        .flat_map(|entry| entry.history.iter().map(|(old, _)| old.to_lowercase()))
        .collect();
    let current: Vec<String> = facts
        .entries()
        .values()
        .map(|entry| entry.value.to_lowercase())
        .collect();

    let mut text = format!("{SUMMARY_MARKER} (messages {first_index}–{last_index})");
    if let Some(known) = facts.render() {
        text.push('\n');
        text.push_str(&known);
    }
    let mut lines: Vec<String> = previous
        .map(|p| {
            p.text
                .lines()
                .filter(|line| line.starts_with("- User:") || line.starts_with("- Assistant:"))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    for message in messages {
        let speaker = match message.role {
            Role::User => "User",
            Role::Assistant => "Assistant",
            Role::System | Role::Tool => continue,
        };
        for sentence in sentences(&message.content) {
            let lower = sentence.to_lowercase();
            let states_stale = stale.iter().any(|old| contains_word(&lower, old));
            let states_current = current.iter().any(|new| contains_word(&lower, new));
            if states_stale && !states_current {
                continue;
            }
            if SALIENT.is_match(sentence) || PROPER_NOUN.is_match(sentence) {
                lines.push(format!("- {speaker}: {sentence}"));
            }
        }
    }
    lines.dedup();
    // Over budget, the oldest sentences go first: the facts block already carries every
    // stated fact, and later sentences are likelier to matter for what comes next.
    let header_tokens = encoding.count(&text);
    let mut kept: Vec<&String> = Vec::new();
    let mut used = header_tokens;
    for line in lines.iter().rev() {
        let cost = encoding.count(line) + 1;
        if used + cost > max_tokens {
            break;
        }
        used += cost;
        kept.push(line);
    }
    for line in kept.into_iter().rev() {
        text.push('\n');
        text.push_str(line);
    }
    Some(Summary {
        text,
        first_index,
        last_index,
    })
}

/// Whether `haystack` contains `needle` as whole words.
fn contains_word(haystack: &str, needle: &str) -> bool {
    haystack.match_indices(needle).any(|(at, _)| {
        let before = haystack[..at].chars().next_back();
        let after = haystack[at + needle.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
    })
}

#[cfg(test)]
mod tests {
    use expect_test::expect;
    use memlayer_store::Timestamp;

    use super::*;

    fn conversation(lines: &[(Role, &str)]) -> Vec<Message> {
        lines
            .iter()
            .enumerate()
            .map(|(i, (role, content))| Message {
                index: i as u64,
                role: *role,
                content: (*content).to_owned(),
                timestamp: Timestamp::from_micros(0),
                token_count: 0,
                metadata: Default::default(),
            })
            .collect()
    }

    /// The extractive summary of `messages` with the facts they state.
    fn summarize(
        previous: Option<&Summary>,
        messages: &[Message],
        max_tokens: u32,
    ) -> Option<Summary> {
        summarize_extractive(SummaryRequest {
            previous,
            messages,
            facts: &FactSheet::from_messages(messages),
            max_tokens,
            encoding: TokenEncoding::Cl100kBase,
        })
    }

    #[test]
    fn keeps_facts_numbers_and_decisions_and_drops_small_talk_and_stale_values() {
        let messages = conversation(&[
            (Role::User, "Hi there! My name is Alicia."),
            (Role::Assistant, "Hello! How can I help you today?"),
            (
                Role::User,
                "My account number is 88-4217-09. The weather is nice today.",
            ),
            (Role::Assistant, "Thanks. I see the account."),
            (
                Role::User,
                "Please contact me by email. We decided to move the launch to 12 May.",
            ),
            (Role::Assistant, "Understood, launch on 12 May."),
            (
                Role::User,
                "Actually, my name is Alice, not Alicia. Sorry about that!",
            ),
            (Role::Assistant, "No problem, Alice."),
        ]);
        let summary = summarize(None, &messages, 500).unwrap();
        assert_eq!((summary.first_index, summary.last_index), (0, 7));
        expect![[r#"
            [Conversation Summary] (messages 0–7)
            Known facts:
            - account number: 88-4217-09
            - contact preference: email
            - name: Alice (corrected; earlier: Alicia)
            - User: My account number is 88-4217-09.
            - User: Please contact me by email.
            - User: We decided to move the launch to 12 May.
            - Assistant: Understood, launch on 12 May.
            - User: Actually, my name is Alice, not Alicia.
            - Assistant: No problem, Alice."#]]
        .assert_eq(&summary.text);
    }

    #[test]
    fn a_later_summary_continues_the_earlier_one_within_its_budget() {
        let first = conversation(&[(Role::User, "Order 5521 is missing a charger.")]);
        let earlier = summarize(None, &first, 200).unwrap();
        let mut second = conversation(&[
            (Role::User, "ignored"),
            (Role::User, "I will call back on Friday."),
        ]);
        second.remove(0);
        let later = summarize(Some(&earlier), &second, 200).unwrap();
        assert_eq!((later.first_index, later.last_index), (0, 1));
        assert!(
            later.text.contains("Order 5521 is missing a charger."),
            "{}",
            later.text
        );
        assert!(
            later.text.contains("I will call back on Friday."),
            "{}",
            later.text
        );

        let tight = summarize(Some(&earlier), &second, 30).unwrap();
        assert!(
            TokenEncoding::Cl100kBase.count(&tight.text) <= 30,
            "{}",
            tight.text
        );
        assert!(
            tight.text.contains("Friday"),
            "the newest sentence survives: {}",
            tight.text
        );
    }

    #[test]
    fn nothing_to_summarise_is_none() {
        assert_eq!(summarize(None, &[], 100), None);
    }
}
