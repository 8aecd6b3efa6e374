//! The content-hash cache: the vector of every recently embedded text, keyed by the text's
//! sha256 within a namespace (the tenant whose text it is), so identical text (a repeated
//! greeting, a re-sent message, a re-index) is embedded once per tenant.
//!
//! Why not once for everyone: a cached vector comes back in microseconds, a computed one in
//! milliseconds, so a cache shared by tenants told any of them, by timing a query, whether
//! another had recently embedded a given text (a name, a diagnosis, an order number).
//!
//! Eviction is generational rather than exact LRU: entries go into the current generation,
//! and when it is full it becomes the previous one and the old previous one is dropped whole.
//! A hit in the previous generation moves the entry back into the current one, so what is
//! used survives and what is not ages out within two generations. This keeps every
//! operation O(1) with two plain hash maps, where an exact LRU needs a linked list beside
//! the map for a difference in hit rate that this workload would not show.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use sha2::{Digest, Sha256};

/// A namespace's cache entries: the sha256 of its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Namespace([u8; 32]);

impl Namespace {
    pub(crate) fn new(name: &str) -> Self {
        Self(Sha256::digest(name.as_bytes()).into())
    }
}

/// A text's entry: its namespace and the sha256 of the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    namespace: Namespace,
    text: [u8; 32],
}

pub(crate) fn key(namespace: Namespace, text: &str) -> Key {
    Key {
        namespace,
        text: Sha256::digest(text.as_bytes()).into(),
    }
}

/// Counters of the cache, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Texts whose vector came from the cache.
    pub hits: u64,
    /// Texts that had to be embedded (each one counts, even when a request holds the same
    /// text twice and it is embedded once).
    pub misses: u64,
    /// Vectors held now.
    pub entries: usize,
}

pub(crate) struct Cache {
    /// Entries per generation; zero disables the cache.
    generation_capacity: usize,
    generations: Mutex<Generations>,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Default)]
struct Generations {
    current: HashMap<Key, Vec<f32>>,
    previous: HashMap<Key, Vec<f32>>,
}

impl Generations {
    fn insert(&mut self, generation_capacity: usize, key: Key, vector: Vec<f32>) {
        if self.current.len() >= generation_capacity && !self.current.contains_key(&key) {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(key, vector);
    }
}

impl Cache {
    /// A cache holding at most `capacity` vectors (rounded up to an even number).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            generation_capacity: capacity.div_ceil(2),
            generations: Mutex::new(Generations::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The cached vector of the text with this key, counting a hit or a miss.
    pub(crate) fn get(&self, key: &Key) -> Option<Vec<f32>> {
        let found = if self.generation_capacity == 0 {
            None
        } else {
            let mut generations = self.lock();
            match generations.current.get(key) {
                Some(vector) => Some(vector.clone()),
                None => generations.previous.remove(key).inspect(|vector| {
                    generations.insert(self.generation_capacity, *key, vector.clone());
                }),
            }
        };
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    pub(crate) fn insert(&self, key: Key, vector: Vec<f32>) {
        if self.generation_capacity > 0 {
            self.lock().insert(self.generation_capacity, key, vector);
        }
    }

    /// Drops every entry of `namespace`: after an erasure, no vector of erased text may be
    /// served (or kept in memory) for a later request that happens to contain the same text.
    pub(crate) fn clear(&self, namespace: Namespace) {
        let mut generations = self.lock();
        let other = |key: &Key, _: &mut Vec<f32>| key.namespace != namespace;
        generations.current.retain(other);
        generations.previous.retain(other);
    }

    pub(crate) fn stats(&self) -> CacheStats {
        let generations = self.lock();
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            entries: generations.current.len() + generations.previous.len(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        // The maps are consistent after every statement, so a panic elsewhere while the lock
        // was held leaves nothing half-done.
        self.generations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(i: u8) -> Key {
        key(Namespace::new("t"), &i.to_string())
    }

    #[test]
    fn holds_at_most_capacity_and_keeps_what_is_used() {
        let cache = Cache::new(4);
        for i in 0..4u8 {
            cache.insert(text(i), vec![f32::from(i)]);
        }
        // Now previous = {0, 1}, current = {2, 3}. The hit on 0 moves it to the current
        // generation, which is full: {2, 3} becomes previous and what was left of the old
        // previous generation, the unused key 1, is dropped.
        assert_eq!(cache.get(&text(0)), Some(vec![0.0]));
        assert_eq!(cache.get(&text(1)), None);
        assert_eq!(cache.get(&text(2)), Some(vec![2.0]));
        let stats = cache.stats();
        assert!(stats.entries <= 4, "{stats:?}");
        assert_eq!((stats.hits, stats.misses), (2, 1));
    }

    #[test]
    fn namespaces_share_no_entry_and_clear_alone() {
        let cache = Cache::new(8);
        let (mine, theirs) = (Namespace::new("acme"), Namespace::new("globex"));
        cache.insert(key(mine, "same text"), vec![1.0]);
        assert_eq!(cache.get(&key(theirs, "same text")), None);
        cache.insert(key(theirs, "same text"), vec![2.0]);
        cache.clear(mine);
        assert_eq!(cache.get(&key(mine, "same text")), None);
        assert_eq!(cache.get(&key(theirs, "same text")), Some(vec![2.0]));
        assert_eq!(cache.stats().entries, 1);
    }

    #[test]
    fn zero_capacity_caches_nothing() {
        let cache = Cache::new(0);
        cache.insert(text(7), vec![1.0]);
        assert_eq!(cache.get(&text(7)), None);
        assert_eq!(
            cache.stats(),
            CacheStats {
                hits: 0,
                misses: 1,
                entries: 0
            }
        );
    }
}
