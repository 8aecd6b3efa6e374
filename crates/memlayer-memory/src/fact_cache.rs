//! Entity memory kept per session between turns. Extracting facts is a fold over the user's
//! messages, and re-reading 2,000 messages with the extractor's regexes took 3 ms of a 6 ms
//! context build (docs/benchmarks.md); with the sheet of the previous turn kept, a turn reads
//! only its new messages.
//!
//! A cached sheet is used only when it provably describes a prefix of what the store holds
//! now: the same session (by creation time), the same load checkpoint, and the same number
//! of messages up to the last one it read — an erased message changes that count, and the
//! sheet is rebuilt. Erasure also removes entries outright ([`FactCache::forget_session`],
//! [`FactCache::forget_user`]) so that no fact of an erased message stays in memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use memlayer_store::{Message, Timestamp};

use crate::entities::FactSheet;

/// Sessions whose sheets are kept; beyond it the least recently used go.
const CAPACITY: usize = 4_096;

#[derive(Clone)]
struct Entry {
    user_id: String,
    created_at: Timestamp,
    load_from: u64,
    /// Index of the last message read, and how many messages up to it were read.
    last_index: u64,
    read: usize,
    sheet: FactSheet,
    used: u64,
}

/// The fact sheets of recently active sessions. Cheap to clone; clones share the entries.
#[derive(Clone, Default)]
pub struct FactCache {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<(String, String), Entry>,
    clock: u64,
}

/// Which session a sheet is for.
pub(crate) struct SessionKey<'a> {
    pub(crate) tenant: &'a str,
    pub(crate) session_id: &'a str,
    pub(crate) user_id: &'a str,
    pub(crate) created_at: Timestamp,
    pub(crate) load_from: u64,
}

impl FactCache {
    /// The facts of `messages` (the session from its load checkpoint on), reading only the
    /// messages the cached sheet has not seen when it still applies.
    pub(crate) fn facts(&self, key: &SessionKey<'_>, messages: &[Message]) -> FactSheet {
        let cache_key = (key.tenant.to_owned(), key.session_id.to_owned());
        let cached = self.lock().entries.get(&cache_key).cloned();
        let (mut sheet, start) = match cached {
            Some(entry)
                if entry.created_at == key.created_at
                    && entry.load_from == key.load_from
                    && messages.partition_point(|m| m.index <= entry.last_index) == entry.read =>
            {
                (entry.sheet, entry.read)
            }
            _ => (FactSheet::default(), 0),
        };
        for message in &messages[start..] {
            for fact in crate::entities::extract(message) {
                sheet.record(fact);
            }
        }
        if let Some(last) = messages.last() {
            let mut inner = self.lock();
            inner.clock += 1;
            let used = inner.clock;
            if inner.entries.len() >= CAPACITY && !inner.entries.contains_key(&cache_key) {
                let oldest = inner
                    .entries
                    .iter()
                    .min_by_key(|(_, entry)| entry.used)
                    .map(|(key, _)| key.clone());
                if let Some(oldest) = oldest {
                    inner.entries.remove(&oldest);
                }
            }
            inner.entries.insert(
                cache_key,
                Entry {
                    user_id: key.user_id.to_owned(),
                    created_at: key.created_at,
                    load_from: key.load_from,
                    last_index: last.index,
                    read: messages.len(),
                    sheet: sheet.clone(),
                    used,
                },
            );
        }
        sheet
    }

    /// Drops a session's sheet (its messages, or some of them, were erased).
    pub fn forget_session(&self, tenant: &str, session_id: &str) {
        self.lock()
            .entries
            .remove(&(tenant.to_owned(), session_id.to_owned()));
    }

    /// Drops the sheets of every session of a user.
    pub fn forget_user(&self, tenant: &str, user_id: &str) {
        self.lock()
            .entries
            .retain(|(t, _), entry| !(t == tenant && entry.user_id == user_id));
    }

    /// Drops every sheet (a purge).
    pub fn clear(&self) {
        self.lock().entries.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use memlayer_store::Role;

    use super::*;

    fn user(index: u64, content: &str) -> Message {
        Message {
            index,
            role: Role::User,
            content: content.to_owned(),
            timestamp: Timestamp::from_micros(0),
            token_count: 0,
            metadata: Default::default(),
        }
    }

    fn key(load_from: u64) -> SessionKey<'static> {
        SessionKey {
            tenant: "t",
            session_id: "s",
            user_id: "u",
            created_at: Timestamp::from_micros(1),
            load_from,
        }
    }

    #[test]
    fn an_erased_message_or_a_clear_invalidates_the_cached_sheet() {
        let cache = FactCache::default();
        let mut messages = vec![
            user(0, "My name is Ada."),
            user(1, "My email is ada@example.org"),
        ];
        assert_eq!(cache.facts(&key(0), &messages).entries().len(), 2);
        messages.push(user(2, "Actually, my name is Ida."));
        let sheet = cache.facts(&key(0), &messages);
        assert_eq!(sheet, FactSheet::from_messages(&messages));
        // Message 1 erased: the count up to the cached last index differs, so it rebuilds.
        messages.remove(1);
        let rebuilt = cache.facts(&key(0), &messages);
        assert_eq!(rebuilt, FactSheet::from_messages(&messages));
        assert!(!rebuilt.entries().contains_key("email"));
        // A clear moves the load checkpoint.
        let after_clear = vec![user(3, "My city is Oslo.")];
        assert_eq!(
            cache.facts(&key(3), &after_clear),
            FactSheet::from_messages(&after_clear)
        );
        cache.forget_user("t", "u");
        assert!(cache.lock().entries.is_empty());
    }
}
