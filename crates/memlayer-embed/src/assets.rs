//! Where the embedder's files live: the ONNX Runtime library and one model directory, in the
//! layout that `cargo xtask setup` installs and the release bundle ships.

use std::path::{Path, PathBuf};

use crate::error::{EmbedError, INSTALL_HINT};

/// The runtime library, relative to the assets directory.
const RUNTIME_LIBRARY: &str = "onnxruntime/libonnxruntime.so";

/// The model directory, relative to the assets directory. Its name is the model's name in
/// [`crate::ModelIdentity`].
const MODEL_DIR: &str = "models/all-MiniLM-L6-v2-quantized";

/// The ONNX graph inside the model directory.
pub(crate) const MODEL_FILE: &str = "model.onnx";

/// The tokenizer's files inside the model directory, in the order fastembed's
/// `TokenizerFiles` takes them.
pub(crate) const TOKENIZER_FILES: [&str; 4] = [
    "tokenizer.json",
    "config.json",
    "special_tokens_map.json",
    "tokenizer_config.json",
];

/// The files an [`crate::Embedder`] loads.
///
/// Nothing is downloaded at run time: every file must already be on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assets {
    /// The ONNX Runtime shared library (`libonnxruntime.so`, version 1.24 or newer).
    pub runtime_library: PathBuf,
    /// A directory holding `model.onnx` (a sentence-transformers encoder whose output is the
    /// last hidden state) and its tokenizer files `tokenizer.json`, `config.json`,
    /// `special_tokens_map.json` and `tokenizer_config.json`.
    pub model_dir: PathBuf,
}

impl Assets {
    /// The assets in the standard layout under `root` (a `memlayer-assets` directory):
    /// `onnxruntime/libonnxruntime.so` and `models/all-MiniLM-L6-v2-quantized/`.
    pub fn in_dir(root: impl AsRef<Path>) -> Self {
        let root = root.as_ref();
        Self {
            runtime_library: root.join(RUNTIME_LIBRARY),
            model_dir: root.join(MODEL_DIR),
        }
    }

    /// Checks that every file is present, and names the first one that is not.
    ///
    /// This checks presence only: whether the library loads and the model parses is known
    /// when [`crate::Embedder::open`] loads them.
    pub fn check(&self) -> Result<(), EmbedError> {
        let model_files = std::iter::once(MODEL_FILE).chain(TOKENIZER_FILES);
        std::iter::once(self.runtime_library.clone())
            .chain(model_files.map(|file| self.model_dir.join(file)))
            .try_for_each(|path| {
                if path.is_file() {
                    Ok(())
                } else {
                    Err(EmbedError::MissingAsset {
                        path,
                        install: INSTALL_HINT,
                    })
                }
            })
    }
}
