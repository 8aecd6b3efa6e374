//! What every handler shares: the store and the server's settings.

use std::sync::Arc;

use memlayer_index::Recall;
use memlayer_memory::TokenEncoding;
use memlayer_store::Store;

/// Settings of the HTTP layer. The binary fills them from its command line and config file.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest request body accepted; larger ones get `413`.
    pub max_body_bytes: usize,
    /// Encoding used to count the tokens of messages whose client did not send a count.
    pub token_encoding: TokenEncoding,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 1 << 20,
            token_encoding: TokenEncoding::default(),
        }
    }
}

/// Shared state of the router. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    store: Store,
    recall: Recall,
    config: Arc<ServerConfig>,
}

impl AppState {
    /// State serving `store`, searched through `recall` (which must index that store), with
    /// `config`.
    pub fn new(store: Store, recall: Recall, config: ServerConfig) -> Self {
        Self {
            store,
            recall,
            config: Arc::new(config),
        }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Hybrid recall over the store's messages.
    pub fn recall(&self) -> &Recall {
        &self.recall
    }

    /// The settings.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }
}
