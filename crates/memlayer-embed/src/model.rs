//! The model: reading its files once, naming it by their content, creating the fastembed
//! instances the workers own, and running one batch through an instance.
//!
//! fastembed and ort are called behind `catch_unwind`: both panic on some failures (a broken
//! library, an unexpected tensor shape) that a server must report as an error, not die of.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use fastembed::{
    InitOptionsUserDefined, Pooling, TextEmbedding, TokenizerFiles, UserDefinedEmbeddingModel,
};
use ort::environment::Environment;
use sha2::{Digest, Sha256};

use crate::assets::{MODEL_FILE, TOKENIZER_FILES};
use crate::error::EmbedError;

/// Which model produced a vector. Stored beside every vector, so vectors of two different
/// models are never compared: the same text gives unrelated vectors under another model,
/// even one of the same dimension.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelIdentity {
    /// The model directory's name, e.g. `all-MiniLM-L6-v2-quantized`.
    pub name: String,
    /// The sha256 of `model.onnx`, lowercase hex: two files with the same name but other
    /// weights are different models.
    pub sha256: String,
    /// The length of every vector the model produces.
    pub dimension: usize,
}

/// The model's files, read once and shared by every worker's instance.
pub(crate) struct ModelFiles {
    model: UserDefinedEmbeddingModel,
    pub(crate) name: String,
    pub(crate) sha256: String,
}

/// Reads the model directory; [`crate::Assets::check`] has made sure every file exists.
pub(crate) fn read(model_dir: &Path) -> Result<ModelFiles, EmbedError> {
    let read = |file: &str| {
        let path = model_dir.join(file);
        std::fs::read(&path).map_err(|err| EmbedError::ModelLoad {
            path,
            reason: err.to_string(),
        })
    };
    let onnx = read(MODEL_FILE)?;
    let sha256 = format!("{:x}", Sha256::digest(&onnx));
    let [tokenizer, config, special_tokens_map, tokenizer_config] = TOKENIZER_FILES;
    let tokenizer_files = TokenizerFiles {
        tokenizer_file: read(tokenizer)?,
        config_file: read(config)?,
        special_tokens_map_file: read(special_tokens_map)?,
        tokenizer_config_file: read(tokenizer_config)?,
    };
    // A user-defined model gets no pooling unless asked; sentence-transformers models are
    // trained with mean pooling over the attention mask, and fastembed then L2-normalises.
    let model = UserDefinedEmbeddingModel::new(onnx, tokenizer_files).with_pooling(Pooling::Mean);
    let name = model_dir
        .file_name()
        .map_or_else(String::new, |name| name.to_string_lossy().into_owned());
    Ok(ModelFiles {
        model,
        name,
        sha256,
    })
}

/// Creates one instance of the model: its own ONNX Runtime session and tokenizer.
pub(crate) fn instantiate(
    files: &ModelFiles,
    model_dir: &Path,
    environment: &Environment,
    max_length: usize,
    intra_threads: usize,
) -> Result<TextEmbedding, EmbedError> {
    let options = InitOptionsUserDefined::new()
        .with_environment(environment.clone())
        .with_max_length(max_length)
        .with_intra_threads(intra_threads);
    let model = files.model.clone();
    let load_error = |reason: String| EmbedError::ModelLoad {
        path: model_dir.to_path_buf(),
        reason,
    };
    catch_unwind(AssertUnwindSafe(|| {
        TextEmbedding::try_new_from_user_defined(model, options)
    }))
    .map_err(|panic| load_error(panic_message(&*panic)))?
    .map_err(|err| load_error(err.to_string()))
}

/// Embeds one batch as one forward pass, so the texts are padded to the longest among them.
pub(crate) fn embed_batch(
    model: &mut TextEmbedding,
    texts: &[String],
) -> Result<Vec<Vec<f32>>, EmbedError> {
    catch_unwind(AssertUnwindSafe(|| model.embed(texts, Some(texts.len()))))
        .map_err(|panic| EmbedError::Inference(panic_message(&*panic)))?
        .map_err(|err| EmbedError::Inference(err.to_string()))
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message");
    format!("panicked: {message}")
}
