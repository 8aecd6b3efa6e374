//! What every handler shares: the store and the server's settings.

use std::sync::Arc;

use memlayer_index::Recall;
use memlayer_llm::ChatClient;
use memlayer_memory::{ContextBuilder, LlmSummarizer, TokenEncoding};
use memlayer_store::Store;

/// Settings of the HTTP layer. The binary fills them from its command line and config file.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest request body accepted; larger ones get `413`.
    pub max_body_bytes: usize,
    /// Encoding used to count the tokens of messages whose client did not send a count.
    pub token_encoding: TokenEncoding,
    /// The chat model that summarises overflowing history; `None` keeps the offline
    /// extractive summariser (which also steps in whenever the model fails).
    pub summarizer_model: Option<ChatClient>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 1 << 20,
            token_encoding: TokenEncoding::default(),
            summarizer_model: None,
        }
    }
}

/// Shared state of the router. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    store: Store,
    recall: Recall,
    contexts: ContextBuilder,
    config: Arc<ServerConfig>,
}

impl AppState {
    /// State serving `store`, searched through `recall` (which must index that store), with
    /// `config`.
    pub fn new(store: Store, recall: Recall, config: ServerConfig) -> Self {
        let mut contexts =
            ContextBuilder::new(store.clone(), recall.clone(), config.token_encoding);
        if let Some(model) = &config.summarizer_model {
            contexts = contexts.with_summarizer(Arc::new(LlmSummarizer::new(model.clone())));
        }
        Self {
            store,
            recall,
            contexts,
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

    /// Builds each turn's context.
    pub fn contexts(&self) -> &ContextBuilder {
        &self.contexts
    }

    /// The settings.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }
}
