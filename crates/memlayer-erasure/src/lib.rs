//! The erasure coordinator: erasing a message, a session, a long-term memory, an episode, a
//! user (their sessions, memories and episodes), or every conversation of a tenant inactive
//! for N days (a purge, or the tenant's daily retention rule), cascading to every record
//! derived from it, as a durable job that resumes after a crash and leaves no recoverable
//! bytes in the store or index files. It holds the store's one `Eraser`: nothing else in
//! the process removes text.
//!
//! An erasure is recorded as a job before its first step; its steps are idempotent (delete
//! from the store, remove from the indexes, remove again once the indexing pipeline caught
//! up, compact the file so freed pages are overwritten or cut off); the receipt is written in
//! the commit that ends the job. Derived data that is computed per request (entity facts,
//! assembled contexts) needs no step: it is read from what remains. `verify` scans files for
//! a canary to show nothing survived.
//!
//! It may depend on the store, index and memory crates, since it must reach every derived
//! layer; it must not depend on the agent, HTTP or the binary.

#![deny(missing_docs)]

mod coordinator;
mod error;
mod job;
mod retention;
mod verify;

pub use coordinator::{Coordinator, RunningErasure, Status};
pub use error::ErasureError;
pub use job::{Counts, ErasureRequest, Receipt, Target};
pub use retention::RetentionRule;
pub use verify::{Occurrence, files_under, scan_files};

#[cfg(test)]
mod tests;
