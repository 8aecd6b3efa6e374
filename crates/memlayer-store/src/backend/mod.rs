//! The boundary between memlayer and where its records are kept, concern by concern: what a
//! backend other than this crate's redb file (memlayer-postgres) provides so that the same
//! callers get the same answers from it.
//!
//! Each concern is one object-safe trait whose methods mirror a handle of [`Store`] (same
//! arguments, same validation, same errors, same ownership rule: another user's session is
//! not found), but are all `async`: a database answers over the network, where this crate's
//! reads are short and synchronous. [`Store`] implements each trait itself, so both backends
//! are held to one contract; `conformance` (feature `conformance`) is that contract as test
//! cases any backend runs.
//!
//! So far: sessions, their messages, runs and summaries, idle sessions and snapshots
//! ([`SessionBackend`], [`SessionView`]); tenants' settings, retention rules and
//! conversation stats ([`TenantBackend`]); API keys and the bootstrap admin key
//! ([`KeyBackend`]); long-term memories, session memories and episodes
//! ([`MemoryBackend`]); the embedding feed ([`FeedBackend`]); the eraser
//! ([`EraserBackend`]). [`Store::served_by`] serves a whole store from a [`Backend`].
//!
//! [`Store`]: crate::Store
//! [`Store::served_by`]: crate::Store::served_by

use std::future::Future;
use std::pin::Pin;

use crate::Result;

mod erasure;
mod feed;
mod keys;
mod memories;
mod sessions;
mod tenants;

pub use erasure::EraserBackend;
pub use feed::FeedBackend;
pub use keys::KeyBackend;
pub use memories::MemoryBackend;
pub use sessions::{SessionBackend, SessionView};
pub use tenants::TenantBackend;

/// A boxed future that may move between threads: what the object-safe traits return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A backend that serves a whole [`Store`] ([`Store::served_by`]): one object per concern,
/// and what the store's own lifecycle needs from it.
///
/// [`Store`]: crate::Store
/// [`Store::served_by`]: crate::Store::served_by
pub trait Backend: Send + Sync {
    /// Sessions, messages, runs, summaries, idle sessions.
    fn sessions(&self) -> &dyn SessionBackend;

    /// Tenants' settings, retention rules and conversation stats.
    fn tenants(&self) -> &dyn TenantBackend;

    /// API keys.
    fn keys(&self) -> &dyn KeyBackend;

    /// Long-term memories, session memories and episodes.
    fn memories(&self) -> &dyn MemoryBackend;

    /// The embedding pipeline's feed and vectors.
    fn feed(&self) -> &dyn FeedBackend;

    /// What removes text, and the erasure journal. [`crate::Store::take_eraser`] still
    /// hands it to one owner only.
    fn eraser(&self) -> &dyn EraserBackend;

    /// Changes after every commit of this process (or, where the backend can tell, of any),
    /// for the workers that wait for new work: [`crate::Store::commits`].
    fn commits(&self) -> tokio::sync::watch::Receiver<u64>;

    /// Succeeds while the backend answers and accepts writes: [`crate::Store::check_ready`].
    fn check_ready(&self) -> BoxFuture<'_, Result<()>>;

    /// Finishes what was submitted and refuses later writes with
    /// [`crate::StoreError::Closed`]: [`crate::Store::shutdown`].
    fn shutdown(&self);
}
