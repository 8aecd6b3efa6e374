//! The one error type of the embedding crate.

use std::path::PathBuf;

/// What to run when an asset is missing: the source checkout installs the assets with xtask,
/// a release bundle ships them beside the binary.
pub(crate) const INSTALL_HINT: &str =
    "run `cargo xtask setup` in a memlayer checkout, or unpack the memlayer release bundle";

/// Everything that can go wrong in [`crate::Embedder`] and [`crate::Assets`].
///
/// Loading errors (`MissingAsset`, `RuntimeLoad`, `ModelLoad`, `InvalidOptions`) happen only in
/// [`crate::Embedder::open`]; once an embedder is open, only `Inference` and `ShutDown` remain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    /// A file of the ONNX Runtime library or of the model is not where the assets say.
    #[error("missing {}: {install}", path.display())]
    MissingAsset {
        /// The file that was looked for.
        path: PathBuf,
        /// How to install it.
        install: &'static str,
    },
    /// The ONNX Runtime library exists but could not be loaded (not a library, wrong
    /// version, or another library already loaded in this process).
    #[error("could not load the ONNX Runtime library {}: {reason}", path.display())]
    RuntimeLoad {
        /// The library file.
        path: PathBuf,
        /// What the loader said.
        reason: String,
    },
    /// The model files exist but ONNX Runtime or the tokenizer rejected them.
    #[error("could not load the embedding model from {}: {reason}", path.display())]
    ModelLoad {
        /// The model directory, or the file that could not be read.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// An [`crate::EmbedderOptions`] value is out of range.
    #[error("invalid embedder option `{option}`: {reason}")]
    InvalidOptions {
        /// The field name.
        option: &'static str,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// Tokenizing or running the model failed for a batch.
    #[error("embedding failed: {0}")]
    Inference(String),
    /// The embedder was shut down (or its workers stopped); no more texts are embedded.
    #[error("the embedder is shut down")]
    ShutDown,
}
