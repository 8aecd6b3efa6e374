//! What a session's context keeps between turns: the fact sheet (entity memory) and the
//! outlines of the messages (index, role, token count). Extracting facts is a fold over the
//! user's messages: re-reading 2,000 messages with the extractor's regexes took 3 ms of a
//! 6 ms context build, and reading the outlines of 2,000 messages 0.4 ms
//! (docs/benchmarks.md). With both kept, a turn reads only the messages appended since.
//!
//! An entry is used only when it provably describes a prefix of the session in the turn's
//! snapshot: the same session (its surrogate key, never reused), the same load checkpoint,
//! the same count of erased messages (`SessionSnapshot::erasures`), and no more messages
//! than the snapshot has. Stored messages are never changed, only appended or erased, so
//! that holds exactly when every message the entry read is still stored. Erasure removes
//! entries outright ([`FactCache::forget_session`], [`FactCache::forget_user`],
//! [`FactCache::clear`]; on a database several nodes share, [`FactCache::forget_removed`] for
//! what other nodes erased, as recall follows it) so that no fact of an erased message stays
//! in memory, and each of those calls starts a new epoch: a turn that read its snapshot before an erasure and
//! stores its entry after it would otherwise bring the erased facts back, so an entry is
//! stored only if no erasure happened since the turn began its read.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use memlayer_store::{Message, MessageOutline, Removal};

use crate::entities::FactSheet;

/// Sessions whose entries are kept; beyond it the least recently used go.
const CAPACITY: usize = 4_096;
/// Outlines kept over all entries (24 bytes each: about 50 MB); beyond it the least recently
/// used entries go.
const MAX_OUTLINES: usize = 1 << 21;

struct Entry {
    user_id: String,
    sid: u64,
    load_from: u64,
    erasures: u64,
    /// The session's `message_count` when read: the entry covers the indices below it.
    read_to: u64,
    /// Shared with the turns using them, so a turn with no new message copies nothing.
    outlines: Arc<Vec<MessageOutline>>,
    sheet: Arc<FactSheet>,
    used: u64,
}

/// What recently active sessions' contexts kept. Cheap to clone; clones share the entries.
#[derive(Clone, Default)]
pub struct FactCache {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    entries: HashMap<(String, String), Entry>,
    /// Outlines held by all entries.
    outlines: usize,
    /// The bounds: `CAPACITY` and `MAX_OUTLINES` but in tests.
    capacity: usize,
    max_outlines: usize,
    clock: u64,
    /// Counts the erasures that dropped entries.
    epoch: u64,
}

impl Default for Inner {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            outlines: 0,
            capacity: CAPACITY,
            max_outlines: MAX_OUTLINES,
            clock: 0,
            epoch: 0,
        }
    }
}

/// One snapshot of a session, as the cache checks entries against it.
pub(crate) struct SessionKey {
    pub(crate) tenant: String,
    pub(crate) session_id: String,
    /// [`FactCache::epoch`] before the snapshot was read.
    pub(crate) epoch: u64,
    pub(crate) user_id: String,
    /// The session's surrogate key.
    pub(crate) sid: u64,
    pub(crate) load_from: u64,
    pub(crate) erasures: u64,
    pub(crate) message_count: u64,
}

/// What a turn took from the cache: the facts and outlines of the messages below
/// `read_to`, from the load checkpoint on (nothing when there was no usable entry).
pub(crate) struct Cached {
    outlines: Arc<Vec<MessageOutline>>,
    sheet: Arc<FactSheet>,
    read_to: u64,
}

impl Cached {
    /// The outlines of the session's messages below [`Cached::read_to`], in index order.
    pub(crate) fn outlines(&self) -> &[MessageOutline] {
        &self.outlines
    }

    /// The first index not covered: the turn reads the outlines and content of the
    /// messages from it on.
    pub(crate) fn read_to(&self) -> u64 {
        self.read_to
    }
}

impl FactCache {
    /// The current epoch. Read it before reading the snapshot a turn checks entries against.
    pub(crate) fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// The entry of the session in `key`'s snapshot if it describes a prefix of it, else
    /// nothing read from the load checkpoint on. The caller reads the messages from
    /// [`Cached::read_to`] on, then passes every message to [`FactCache::extend`].
    ///
    /// Taking an entry and extending it are two steps so the caller can read only the
    /// content it needs in between; the entry checked here is the one extended, whatever
    /// other turns store meanwhile.
    pub(crate) fn cached(&self, key: &SessionKey) -> Cached {
        let cache_key = (key.tenant.clone(), key.session_id.clone());
        match self.lock().entries.get(&cache_key) {
            Some(entry)
                if entry.sid == key.sid
                    && entry.load_from == key.load_from
                    && entry.erasures == key.erasures
                    && entry.read_to <= key.message_count =>
            {
                Cached {
                    outlines: Arc::clone(&entry.outlines),
                    sheet: Arc::clone(&entry.sheet),
                    read_to: entry.read_to,
                }
            }
            _ => Cached {
                outlines: Arc::default(),
                sheet: Arc::default(),
                read_to: key.load_from,
            },
        }
    }

    /// The facts of `messages` (the session in `key`'s snapshot from its load checkpoint on;
    /// those from `cached.read_to()` on with their content): `cached` extended with the
    /// messages it has not read, kept for the next turn unless an erasure dropped entries
    /// since `key.epoch`.
    pub(crate) fn extend(
        &self,
        key: &SessionKey,
        cached: Cached,
        messages: &[Message],
    ) -> Arc<FactSheet> {
        let Cached {
            mut outlines,
            mut sheet,
            read_to,
        } = cached;
        let unread = &messages[messages.partition_point(|m| m.index < read_to)..];
        for message in unread {
            for fact in crate::entities::extract(message) {
                Arc::make_mut(&mut sheet).record(fact);
            }
        }
        if !unread.is_empty() {
            Arc::make_mut(&mut outlines).extend(unread.iter().map(|m| MessageOutline {
                index: m.index,
                role: m.role,
                timestamp: m.timestamp,
                token_count: m.token_count,
            }));
        }
        let cache_key = (key.tenant.clone(), key.session_id.clone());
        let mut inner = self.lock();
        if inner.epoch != key.epoch {
            return sheet;
        }
        inner.clock += 1;
        let used = inner.clock;
        if let Some(replaced) = inner.entries.remove(&cache_key) {
            inner.outlines -= replaced.outlines.len();
        }
        while !inner.entries.is_empty()
            && (inner.entries.len() >= inner.capacity
                || inner.outlines + outlines.len() > inner.max_outlines)
        {
            let oldest = inner
                .entries
                .iter()
                .min_by_key(|(_, entry)| entry.used)
                .map(|(key, _)| key.clone());
            if let Some(evicted) = oldest.and_then(|oldest| inner.entries.remove(&oldest)) {
                inner.outlines -= evicted.outlines.len();
            }
        }
        inner.outlines += outlines.len();
        inner.entries.insert(
            cache_key,
            Entry {
                user_id: key.user_id.clone(),
                sid: key.sid,
                load_from: key.load_from,
                erasures: key.erasures,
                read_to: key.message_count,
                outlines,
                sheet: Arc::clone(&sheet),
                used,
            },
        );
        sheet
    }

    /// Drops a session's entry (its messages, or some of them, were erased).
    pub fn forget_session(&self, tenant: &str, session_id: &str) {
        let mut inner = self.lock();
        inner.epoch += 1;
        if let Some(entry) = inner
            .entries
            .remove(&(tenant.to_owned(), session_id.to_owned()))
        {
            inner.outlines -= entry.outlines.len();
        }
    }

    /// Drops the entries of every session of a user.
    pub fn forget_user(&self, tenant: &str, user_id: &str) {
        let mut inner = self.lock();
        inner.epoch += 1;
        inner
            .entries
            .retain(|(t, _), entry| !(t == tenant && entry.user_id == user_id));
        inner.outlines = inner.entries.values().map(|e| e.outlines.len()).sum();
    }

    /// Drops the entries of the sessions another node erased from (a whole session, or
    /// one of its messages), as this node's indexes follow it.
    pub fn forget_removed(&self, removals: &[Removal]) {
        let sids: HashSet<u64> = removals
            .iter()
            .filter_map(|removal| match removal {
                Removal::Session(sid) => Some(*sid),
                Removal::Message(key) => Some(key.session()),
                Removal::Memory(_) => None,
            })
            .collect();
        if sids.is_empty() {
            return;
        }
        let mut inner = self.lock();
        inner.epoch += 1;
        inner.entries.retain(|_, entry| !sids.contains(&entry.sid));
        inner.outlines = inner.entries.values().map(|e| e.outlines.len()).sum();
    }

    /// Drops every entry (a purge).
    pub fn clear(&self) {
        let mut inner = self.lock();
        inner.epoch += 1;
        inner.entries.clear();
        inner.outlines = 0;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use memlayer_store::{Role, Timestamp};

    use super::*;

    fn user(index: u64, content: &str) -> Message {
        Message {
            index,
            role: Role::User,
            content: content.to_owned(),
            timestamp: Timestamp::from_micros(index),
            token_count: 3,
            metadata: Default::default(),
        }
    }

    /// A snapshot of session `s` (surrogate key 1) holding `messages`, after `erasures`.
    fn key(load_from: u64, erasures: u64, messages: &[Message]) -> SessionKey {
        SessionKey {
            tenant: "t".into(),
            session_id: "s".into(),
            epoch: 0,
            user_id: "u".into(),
            sid: 1,
            load_from,
            erasures,
            message_count: messages.last().map_or(load_from, |m| m.index + 1),
        }
    }

    /// A turn: the cached entry, checked to cover a prefix of `messages`, extended.
    fn turn(cache: &FactCache, key: &SessionKey, messages: &[Message]) -> FactSheet {
        let cached = cache.cached(key);
        let covered = messages.partition_point(|m| m.index < cached.read_to());
        let outlines: Vec<u64> = cached.outlines().iter().map(|o| o.index).collect();
        let indices: Vec<u64> = messages[..covered].iter().map(|m| m.index).collect();
        assert_eq!(
            outlines, indices,
            "the entry does not describe the snapshot"
        );
        FactSheet::clone(&cache.extend(key, cached, messages))
    }

    #[test]
    fn turns_read_only_new_messages_and_an_erasure_or_a_clear_starts_afresh() {
        let cache = FactCache::default();
        let mut messages = vec![
            user(0, "My name is Ada."),
            user(1, "My email is ada@example.org"),
        ];
        assert_eq!(
            turn(&cache, &key(0, 0, &messages), &messages)
                .entries()
                .len(),
            2
        );
        messages.push(user(2, "Actually, my name is Ida."));
        assert_eq!(cache.cached(&key(0, 0, &messages)).read_to(), 2);
        let sheet = turn(&cache, &key(0, 0, &messages), &messages);
        assert_eq!(sheet, FactSheet::from_messages(&messages));
        // Message 1 erased: the erasure count differs, so nothing is taken from the entry.
        messages.remove(1);
        let after_erasure = key(0, 1, &messages);
        assert_eq!(cache.cached(&after_erasure).read_to(), 0);
        let rebuilt = turn(&cache, &after_erasure, &messages);
        assert_eq!(rebuilt, FactSheet::from_messages(&messages));
        assert!(!rebuilt.entries().contains_key("email"));
        // A clear moves the load checkpoint.
        let after_clear = vec![user(3, "My city is Oslo.")];
        assert_eq!(
            turn(&cache, &key(3, 1, &after_clear), &after_clear),
            FactSheet::from_messages(&after_clear)
        );
        cache.forget_user("t", "u");
        assert!(cache.lock().entries.is_empty());
        assert_eq!(cache.lock().outlines, 0);
    }

    #[test]
    fn an_entry_stored_from_before_an_erasure_is_not_trusted_after_it() {
        let cache = FactCache::default();
        let before = vec![
            user(0, "My name is Ada."),
            user(1, "My email is ada@example.org"),
        ];
        turn(&cache, &key(0, 0, &before), &before);
        // A slow turn takes the entry for a snapshot holding message 1 ...
        let slow_key = key(0, 0, &before);
        let slow_turn = cache.cached(&slow_key);
        // ... message 1 is erased (erasure drops the entry) ...
        cache.forget_session("t", "s");
        // ... and the slow turn stores its entry, with the erased email, afterwards.
        cache.extend(&slow_key, slow_turn, &before);
        // The next turn's snapshot counts the erasure: the entry is refused.
        let after = vec![user(0, "My name is Ada."), user(2, "My city is Oslo.")];
        let sheet = turn(&cache, &key(0, 1, &after), &after);
        assert_eq!(sheet, FactSheet::from_messages(&after));
        assert!(!sheet.entries().contains_key("email"));
    }

    #[test]
    fn what_another_node_erased_leaves_the_entries_of_its_sessions_only() {
        let cache = FactCache::default();
        let messages = vec![user(0, "My email is ada@example.org")];
        let session = |name: &str, sid: u64| SessionKey {
            session_id: name.into(),
            sid,
            ..key(0, 0, &messages)
        };
        for (name, sid) in [("a", 1), ("b", 2), ("c", 3)] {
            turn(&cache, &session(name, sid), &messages);
        }
        let epoch = cache.lock().epoch;
        cache.forget_removed(&[
            Removal::Session(1),
            Removal::Message(memlayer_store::MessageKey::new(3, 0)),
        ]);
        let inner = cache.lock();
        let kept: Vec<&str> = inner.entries.keys().map(|(_, s)| s.as_str()).collect();
        assert_eq!(kept, ["b"]);
        assert_eq!(inner.outlines, 1);
        // A turn that read before it stores nothing afterwards.
        assert_eq!(inner.epoch, epoch + 1);
    }

    #[test]
    fn an_entry_newer_than_the_snapshot_is_not_used() {
        let cache = FactCache::default();
        let longer = vec![user(0, "My name is Ada."), user(1, "My city is Oslo.")];
        turn(&cache, &key(0, 0, &longer), &longer);
        // A turn that read the session before message 1 was appended.
        let shorter = &longer[..1];
        assert_eq!(cache.cached(&key(0, 0, shorter)).read_to(), 0);
        assert_eq!(
            turn(&cache, &key(0, 0, shorter), shorter),
            FactSheet::from_messages(shorter)
        );
    }

    #[test]
    fn the_least_recently_used_entries_go_beyond_the_bounds() {
        let cache = FactCache::default();
        cache.lock().max_outlines = 10;
        cache.lock().capacity = 3;
        let messages: Vec<Message> = (0..4).map(|i| user(i, "hello")).collect();
        let session = |name: &str, messages: &[Message]| SessionKey {
            session_id: name.into(),
            ..key(0, 0, messages)
        };
        turn(&cache, &session("a", &messages), &messages);
        turn(&cache, &session("b", &messages), &messages);
        turn(&cache, &session("a", &messages), &messages);
        // 12 outlines would exceed 10: "b", used least recently, goes.
        turn(&cache, &session("c", &messages), &messages);
        let kept = |cache: &FactCache| {
            let mut names: Vec<String> = cache
                .lock()
                .entries
                .keys()
                .map(|(_, s)| s.clone())
                .collect();
            names.sort();
            names
        };
        assert_eq!(kept(&cache), ["a", "c"]);
        assert_eq!(cache.lock().outlines, 8);
        // Three short sessions reach the capacity: the least recently used goes.
        let one = &messages[..1];
        turn(&cache, &session("d", one), one);
        turn(&cache, &session("e", one), one);
        assert_eq!(kept(&cache), ["c", "d", "e"]);
        assert_eq!(cache.lock().outlines, 6);
    }
}
