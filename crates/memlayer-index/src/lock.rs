//! The lock an index lives behind: many searches at once, one writer, and no poisoning.

use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// A [`RwLock`] whose guards are taken even after a thread panicked holding it. The indexes
/// behind it are derived data whose every update leaves them searchable, so a panic in one
/// request must not turn every later search and erasure into a panic too.
#[derive(Debug, Default)]
pub struct IndexLock<T>(RwLock<T>);

impl<T> IndexLock<T> {
    /// `value`, behind the lock.
    pub fn new(value: T) -> Self {
        Self(RwLock::new(value))
    }

    /// Shared access, for searches.
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Exclusive access, for changes.
    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The value, out of the lock.
    pub fn into_inner(self) -> T {
        self.0.into_inner().unwrap_or_else(PoisonError::into_inner)
    }
}
