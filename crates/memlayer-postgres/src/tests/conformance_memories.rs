//! The memories concern's conformance cases, each on a database of its own.

use std::sync::Arc;

use super::fresh_store;

memlayer_store::memory_conformance!(Arc::new(fresh_store().await));
