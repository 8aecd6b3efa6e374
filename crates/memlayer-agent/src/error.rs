//! The crate's one error type: the caller's mistakes, a missing model, a failed upstream (with
//! the run that recorded the failure) and the failures of the layers below.

use memlayer_erasure::ErasureError;
use memlayer_llm::LlmError;
use memlayer_memory::MemoryError;
use memlayer_store::StoreError;

/// Everything that can go wrong in a tool call or an agent run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// A request or a model's tool call named something invalid: an unknown tool, arguments
    /// it does not take, a value out of range. `code` is stable (`unknown_tool`,
    /// `invalid_arguments`, `invalid_value`).
    #[error("{message}")]
    Invalid {
        /// Stable and machine-readable.
        code: &'static str,
        /// What is wrong.
        message: String,
    },
    /// No such memory of the session's user.
    #[error("no memory {memory_id}")]
    MemoryNotFound {
        /// The id the call named.
        memory_id: u64,
    },
    /// Runs need a chat model and none is configured. Checked before anything is stored.
    #[error("no chat model is configured for agent runs")]
    ModelNotConfigured,
    /// As many runs as the agent admits are going on. Checked before anything is stored.
    #[error("{limit} agent runs are going on, as many as the server admits")]
    Overloaded {
        /// The most runs at once.
        limit: usize,
    },
    /// The model could not be reached or gave no usable answer. The user's message is stored
    /// and the run is recorded as failed with `source` as its reason.
    #[error("the run {run_id} failed: {source}")]
    Upstream {
        /// The failed run.
        run_id: String,
        /// Its session.
        session_id: String,
        /// Why (boxed: the other variants are small, and every `Result` carries the largest).
        source: Box<LlmError>,
    },
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Context assembly or long-term memory failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// A forget could not be erased.
    #[error(transparent)]
    Erasure(#[from] ErasureError),
    /// The task finishing the run panicked or was cancelled.
    #[error("a background task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
}

impl AgentError {
    /// The error for a log line: its message without the values clients chose or stored or
    /// the model said (see [`memlayer_store::StoreError::for_log`] and
    /// [`LlmError::for_log`]).
    pub fn for_log(&self) -> String {
        match self {
            Self::Invalid { code, .. } => format!("invalid request: {code}"),
            Self::Upstream { run_id, source, .. } => {
                format!("the run {run_id} failed: {}", source.for_log())
            }
            Self::Store(store) => store.for_log(),
            Self::Memory(memory) => memory.for_log(),
            Self::Erasure(erasure) => erasure.for_log(),
            // Memory ids are the store's numbers, not chosen by clients.
            Self::MemoryNotFound { .. }
            | Self::ModelNotConfigured
            | Self::Overloaded { .. }
            | Self::Task(_) => self.to_string(),
        }
    }

    pub(crate) fn invalid(code: &'static str, message: impl Into<String>) -> Self {
        Self::Invalid {
            code,
            message: message.into(),
        }
    }
}
