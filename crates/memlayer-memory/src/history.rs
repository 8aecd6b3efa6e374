//! Cutting a conversation into exchanges and choosing which of them fit: full history, the
//! sliding window (by turns or by tokens), history depth, and dropping overflow under a
//! budget. Pure functions over stored messages; rendering is `render`'s job.

use memlayer_store::{Message, Role};

/// Tokens a chat format spends on one message besides its content (role marker, separators).
/// cl100k/o200k chat formats spend 3–4; counting 4 keeps every estimate on the safe side.
pub const MESSAGE_OVERHEAD_TOKENS: u32 = 4;

/// Tokens one message costs in a prompt.
pub fn message_tokens(message: &Message) -> u32 {
    message.token_count.saturating_add(MESSAGE_OVERHEAD_TOKENS)
}

/// A run of messages that is kept or dropped as a whole, so no answer ever appears without
/// its question.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Exchange<'a> {
    /// 1-based number of the user turn that opens the exchange; 0 for messages before the
    /// first user message.
    pub turn: u64,
    /// The messages, in order: a user message and every assistant and tool message after it.
    pub messages: &'a [Message],
}

impl<'a> Exchange<'a> {
    /// The user's question, when the exchange opens with one.
    pub fn question(&self) -> Option<&'a Message> {
        self.messages.first().filter(|m| m.role == Role::User)
    }

    /// Tokens the whole exchange costs (at most `u32::MAX`: token counts are the client's,
    /// and such an exchange fits no budget anyway).
    pub fn tokens(&self) -> u32 {
        saturating_sum(self.messages.iter().map(message_tokens))
    }
}

/// A conversation split for context assembly.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct History<'a> {
    /// System messages, wherever they stood. They carry instructions and are never dropped.
    pub system: Vec<&'a Message>,
    /// The other messages as exchanges, oldest first.
    pub exchanges: Vec<Exchange<'a>>,
}

impl<'a> History<'a> {
    /// Splits `messages` (in index order) into system messages and exchanges.
    pub fn new(messages: &'a [Message]) -> Self {
        let mut history = History::default();
        let mut turn = 0;
        let mut start: Option<usize> = None;
        let close = |history: &mut History<'a>, start: &mut Option<usize>, end: usize, turn| {
            if let Some(begin) = start.take() {
                history.exchanges.push(Exchange {
                    turn,
                    messages: &messages[begin..end],
                });
            }
        };
        for (position, message) in messages.iter().enumerate() {
            match message.role {
                Role::System => {
                    close(&mut history, &mut start, position, turn);
                    history.system.push(message);
                }
                Role::User => {
                    close(&mut history, &mut start, position, turn);
                    turn += 1;
                    start = Some(position);
                }
                Role::Assistant | Role::Tool => {
                    start.get_or_insert(position);
                }
            }
        }
        close(&mut history, &mut start, messages.len(), turn);
        history
    }
}

/// Which exchanges a window keeps. Everything before the kept ones is `older`.
#[derive(Debug, Clone, PartialEq)]
pub struct Window<'a> {
    /// Exchanges kept in full, oldest first.
    pub recent: Vec<Exchange<'a>>,
    /// Exchanges left out, oldest first: what history depth turns into stubs, a summary
    /// replaces, or retrieval may bring back.
    pub older: Vec<Exchange<'a>>,
}

impl<'a> Window<'a> {
    fn split(exchanges: &[Exchange<'a>], keep: usize) -> Self {
        let cut = exchanges.len().saturating_sub(keep);
        Self {
            recent: exchanges[cut..].to_vec(),
            older: exchanges[..cut].to_vec(),
        }
    }

    /// Every exchange.
    pub fn full(history: &History<'a>) -> Self {
        Self::split(&history.exchanges, history.exchanges.len())
    }

    /// The last `max_turns` exchanges (turn pairs).
    pub fn last_turns(history: &History<'a>, max_turns: usize) -> Self {
        Self::split(&history.exchanges, max_turns)
    }

    /// As many of the newest exchanges as fit in `max_tokens`.
    pub fn last_tokens(history: &History<'a>, max_tokens: u32) -> Self {
        let mut used = 0u32;
        let keep = history
            .exchanges
            .iter()
            .rev()
            .take_while(|exchange| {
                used = used.saturating_add(exchange.tokens());
                used <= max_tokens
            })
            .count();
        Self::split(&history.exchanges, keep)
    }

    /// Drops the oldest kept exchanges, whole, until the kept ones cost at most `budget`
    /// tokens. The newest exchange is dropped too if it alone does not fit: a budget is a
    /// promise, and the caller reports what was dropped.
    pub fn drop_overflow(mut self, budget: u32) -> Self {
        let mut total: u64 = self.recent.iter().map(|e| u64::from(e.tokens())).sum();
        let mut dropped = 0;
        for exchange in &self.recent {
            if total <= u64::from(budget) {
                break;
            }
            total -= u64::from(exchange.tokens());
            dropped += 1;
        }
        self.older.extend(self.recent.drain(..dropped));
        self
    }

    /// Tokens of the kept exchanges (at most `u32::MAX`).
    pub fn tokens(&self) -> u32 {
        saturating_sum(self.recent.iter().map(Exchange::tokens))
    }
}

/// The sum of `counts`, at most `u32::MAX`: counts come from clients, and a plain sum of
/// large ones overflowed (a panic in a debug build).
pub(crate) fn saturating_sum(counts: impl Iterator<Item = u32>) -> u32 {
    counts.fold(0, u32::saturating_add)
}

#[cfg(test)]
mod tests {
    #[test]
    fn token_counts_past_u32_saturate_instead_of_overflowing() {
        use memlayer_store::{Message, Role, Timestamp};
        let huge = |index, role| Message {
            index,
            role,
            content: "x".into(),
            metadata: Default::default(),
            timestamp: Timestamp::from_micros(0),
            token_count: u32::MAX - 1,
        };
        let messages = [huge(0, Role::User), huge(1, Role::Assistant)];
        let history = super::History::new(&messages);
        assert_eq!(history.exchanges[0].tokens(), u32::MAX);
        let kept = super::Window::full(&history).drop_overflow(1000);
        assert_eq!(kept.tokens(), 0, "the exchange fits no budget");
    }

    use super::*;
    use memlayer_store::Timestamp;
    use proptest::prelude::*;

    pub(crate) fn message(index: u64, role: Role, content: &str, token_count: u32) -> Message {
        Message {
            index,
            role,
            content: content.to_owned(),
            timestamp: Timestamp::from_micros(index),
            token_count,
            metadata: Default::default(),
        }
    }

    fn conversation(roles: &[Role]) -> Vec<Message> {
        roles
            .iter()
            .enumerate()
            .map(|(i, role)| message(i as u64, *role, &format!("m{i}"), 10))
            .collect()
    }

    fn turns(exchanges: &[Exchange<'_>]) -> Vec<u64> {
        exchanges.iter().map(|e| e.turn).collect()
    }

    use Role::{Assistant as A, System as S, Tool as T, User as U};

    #[test]
    fn exchanges_open_at_user_messages_and_keep_tools_with_their_answer() {
        let messages = conversation(&[S, A, U, A, T, A, U, S, U, A]);
        let history = History::new(&messages);
        assert_eq!(
            history.system.iter().map(|m| m.index).collect::<Vec<_>>(),
            [0, 7]
        );
        let spans: Vec<Vec<u64>> = history
            .exchanges
            .iter()
            .map(|e| e.messages.iter().map(|m| m.index).collect())
            .collect();
        assert_eq!(spans, [vec![1], vec![2, 3, 4, 5], vec![6], vec![8, 9]]);
        assert_eq!(turns(&history.exchanges), [0, 1, 2, 3]);
        assert_eq!(history.exchanges[0].question(), None);
        assert_eq!(history.exchanges[1].question().map(|m| m.index), Some(2));
    }

    #[test]
    fn windows_by_turns_and_by_tokens() {
        let messages = conversation(&[U, A, U, A, U, A]);
        let history = History::new(&messages);
        let window = Window::last_turns(&history, 2);
        assert_eq!(
            (turns(&window.older), turns(&window.recent)),
            (vec![1], vec![2, 3])
        );
        // Each exchange costs 2 × (10 + 4) = 28 tokens.
        let window = Window::last_tokens(&history, 60);
        assert_eq!(turns(&window.recent), [2, 3]);
        assert_eq!(Window::last_tokens(&history, 27).recent, []);
        assert_eq!(turns(&Window::full(&history).recent), [1, 2, 3]);
    }

    #[test]
    fn overflow_drops_whole_exchanges_oldest_first() {
        let messages = conversation(&[U, A, A, U, A, U, A]);
        let history = History::new(&messages);
        let window = Window::full(&history).drop_overflow(60);
        assert_eq!(
            (turns(&window.older), turns(&window.recent)),
            (vec![1], vec![2, 3])
        );
        assert_eq!(window.tokens(), 56);
    }

    fn arb_roles() -> impl Strategy<Value = Vec<Role>> {
        proptest::collection::vec(
            prop_oneof![Just(S), Just(U), Just(U), Just(A), Just(A), Just(T)],
            0..60,
        )
    }

    proptest! {
        /// Exchanges and system messages partition the conversation, in order.
        #[test]
        fn history_partitions_the_messages(roles in arb_roles()) {
            let messages = conversation(&roles);
            let history = History::new(&messages);
            let mut seen: Vec<u64> = history.system.iter().map(|m| m.index).collect();
            for exchange in &history.exchanges {
                prop_assert!(!exchange.messages.is_empty());
                prop_assert!(exchange.messages[1..].iter().all(|m| matches!(m.role, A | T)));
                seen.extend(exchange.messages.iter().map(|m| m.index));
            }
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..messages.len() as u64).collect::<Vec<_>>());
        }

        /// Dropping overflow never exceeds the budget, never splits an exchange, and keeps
        /// the newest exchanges that fit.
        #[test]
        fn drop_overflow_respects_the_budget(roles in arb_roles(), budget in 0u32..1_000) {
            let messages = conversation(&roles);
            let history = History::new(&messages);
            let window = Window::full(&history).drop_overflow(budget);
            prop_assert!(window.tokens() <= budget);
            prop_assert_eq!(window.older.len() + window.recent.len(), history.exchanges.len());
            let kept_from = window.older.len();
            prop_assert_eq!(&window.recent[..], &history.exchanges[kept_from..]);
            if let Some(next) = window.older.last() {
                prop_assert!(window.tokens() + next.tokens() > budget, "a fitting exchange was dropped");
            }
        }
    }
}
