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
//! ([`MemoryBackend`]). The embedding feed and the eraser (which removes memories and
//! episodes) follow; then [`Store`] serves from a backend that implements them all.
//!
//! [`Store`]: crate::Store

use std::future::Future;
use std::pin::Pin;

mod keys;
mod memories;
mod sessions;
mod tenants;

pub use keys::KeyBackend;
pub use memories::MemoryBackend;
pub use sessions::{SessionBackend, SessionView};
pub use tenants::TenantBackend;

/// A boxed future that may move between threads: what the object-safe traits return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
