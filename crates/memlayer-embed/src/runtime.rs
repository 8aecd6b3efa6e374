//! The process's one ONNX Runtime. ort loads the shared library at most once per process and
//! allows one environment, so every embedder in the process shares them, and asking for a
//! second, different library is an error rather than a silent use of the first.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use ort::environment::Environment;

use crate::error::{EmbedError, INSTALL_HINT};

struct Runtime {
    /// Canonical, so two spellings of one file are recognised as the same library.
    library: PathBuf,
    environment: Environment,
}

/// Set by the first successful load and never cleared: ort cannot unload the library or
/// create a second environment.
static RUNTIME: Mutex<Option<Runtime>> = Mutex::new(None);

/// The environment for sessions, loading ONNX Runtime from `library` on first use.
///
/// ort's own lazy loading panics when the library cannot be opened; loading it here first,
/// through `ort::init_from`, turns every failure into an [`EmbedError::RuntimeLoad`].
pub(crate) fn environment(library: &Path) -> Result<Environment, EmbedError> {
    let canonical = library
        .canonicalize()
        .map_err(|_| EmbedError::MissingAsset {
            path: library.to_path_buf(),
            install: INSTALL_HINT,
        })?;
    let load_error = |reason: String| EmbedError::RuntimeLoad {
        path: library.to_path_buf(),
        reason,
    };

    let mut runtime = RUNTIME.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(runtime) = runtime.as_ref() {
        return if runtime.library == canonical {
            Ok(runtime.environment.clone())
        } else {
            Err(load_error(format!(
                "this process already uses the ONNX Runtime library {}, and a process can \
                 load only one",
                runtime.library.display()
            )))
        };
    }
    let environment = ort::init_from(&canonical)
        .map_err(|err| load_error(err.to_string()))?
        .with_name("memlayer")
        .build()
        .map_err(|err| load_error(err.to_string()))?;
    *runtime = Some(Runtime {
        library: canonical,
        environment: environment.clone(),
    });
    Ok(environment)
}
