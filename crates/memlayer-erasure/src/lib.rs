//! The erasure coordinator: erasing a message, a session, a user or everything older than N
//! days, cascading to every record derived from it, as a durable job that resumes after a
//! crash and leaves no recoverable bytes.
//!
//! Empty until the erasure issue fills it (until then `memlayer-store` deletes a session and
//! its own records directly). It may depend on the store, embedding, index and memory crates,
//! since it must reach every derived layer; it must not depend on HTTP or the binary.

#![deny(missing_docs)]
