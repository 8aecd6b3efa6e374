//! The embedding feed's contract: memlayer-store's feed cases, each on a database of its own,
//! answered as the redb store answers them.

use std::sync::Arc;

use super::fresh_store;

memlayer_store::feed_conformance!(Arc::new(fresh_store().await));
