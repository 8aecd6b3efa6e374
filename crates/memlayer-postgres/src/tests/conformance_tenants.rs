//! The backend contract for tenants and keys: memlayer-store's conformance cases, each on a
//! database of its own, answered as the redb store answers them.

use std::sync::Arc;

use super::fresh_store;

memlayer_store::tenant_conformance!(Arc::new(fresh_store().await));
memlayer_store::key_conformance!(Arc::new(fresh_store().await));
