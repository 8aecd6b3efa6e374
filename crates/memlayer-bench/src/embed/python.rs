//! The Python side of the embedding benchmark: a virtual environment under the target
//! directory with pinned `onnxruntime`, `tokenizers` and `numpy` (never installed globally),
//! and runs of `python/embed_reference.py` in it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use serde::Deserialize;

/// The onnxruntime release whose library `cargo xtask setup` installs for the Rust side
/// (xtask/src/setup.rs, `ONNXRUNTIME`), pinned here too so both sides run the same ONNX
/// Runtime.
pub(crate) const ONNXRUNTIME: &str = "onnxruntime==1.24.4";

/// What the reference script needs, pinned.
const REQUIREMENTS: &str = "onnxruntime==1.24.4\ntokenizers==0.23.3\nnumpy==2.4.6\n";

/// The reference script.
pub(crate) const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/python/embed_reference.py");

/// A ready virtual environment.
pub(crate) struct Venv {
    python: PathBuf,
    script: PathBuf,
}

/// One timed pass of the reference script over every text.
#[derive(Deserialize)]
pub(crate) struct Run {
    pub(crate) seconds: f64,
    pub(crate) onnxruntime: String,
    pub(crate) tokenizers: String,
}

/// How the script runs the model; the same settings as the Rust side.
pub(crate) struct Settings<'a> {
    pub(crate) model_dir: &'a Path,
    pub(crate) texts_json: &'a Path,
    pub(crate) batch_size: usize,
    pub(crate) threads: usize,
    pub(crate) max_length: usize,
}

impl Venv {
    /// Creates `<target>/embed-bench-venv` and installs the requirements, unless a previous
    /// run left it with exactly these requirements. pip may take the onnxruntime wheel that
    /// setup downloaded to `<target>/wheels` instead of fetching it again.
    pub(crate) fn ensure(target_dir: &Path) -> anyhow::Result<Self> {
        let dir = target_dir.join("embed-bench-venv");
        let python = dir.join("bin").join("python");
        let marker = dir.join("memlayer-requirements.txt");
        let venv = Self {
            python,
            script: PathBuf::from(SCRIPT),
        };
        if fs::read_to_string(&marker).is_ok_and(|installed| installed == REQUIREMENTS) {
            return Ok(venv);
        }
        eprintln!(
            "memlayer-bench: creating {} (pinned: {})",
            dir.display(),
            REQUIREMENTS.trim().replace('\n', " ")
        );
        let mut create = Command::new("python3");
        create.args(["-m", "venv", "--clear"]).arg(&dir);
        run(create).context("could not create the benchmark's Python virtual environment")?;
        // The marker is written last, so an interrupted install is redone next time.
        fs::write(dir.join("requirements.txt"), REQUIREMENTS)
            .context("could not write the venv's requirements")?;
        let mut install = Command::new(&venv.python);
        install
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-input",
                "--find-links",
            ])
            .arg(target_dir.join("wheels"))
            .arg("--requirement")
            .arg(dir.join("requirements.txt"));
        run(install).context("could not install the reference script's packages")?;
        fs::write(&marker, REQUIREMENTS).context("could not write the venv's marker")?;
        Ok(venv)
    }

    /// Runs the reference script once; returns its timing and its vectors in input order.
    pub(crate) fn run(
        &self,
        settings: &Settings<'_>,
        vectors_out: &Path,
    ) -> anyhow::Result<(Run, Vec<f32>)> {
        let mut command = Command::new(&self.python);
        command
            .arg(&self.script)
            .arg("--model-dir")
            .arg(settings.model_dir)
            .arg("--texts")
            .arg(settings.texts_json)
            .args(["--batch-size", &settings.batch_size.to_string()])
            .args(["--threads", &settings.threads.to_string()])
            .args(["--max-length", &settings.max_length.to_string()])
            .arg("--vectors-out")
            .arg(vectors_out);
        let output = output(command)?;
        let run: Run = serde_json::from_str(output.trim())
            .with_context(|| format!("the reference script printed {output:?}"))?;
        let bytes = fs::read(vectors_out)
            .with_context(|| format!("could not read {}", vectors_out.display()))?;
        let vectors = bytes
            .chunks_exact(4)
            .map(|chunk| f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]))
            .collect();
        Ok((run, vectors))
    }
}

/// Runs a command to completion with inherited standard streams, failing on a non-zero exit.
fn run(mut command: Command) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("could not start {command:?}"))?;
    if !status.success() {
        bail!("{command:?} exited with {status}");
    }
    Ok(())
}

/// Runs a command and returns its standard output; its standard error is passed through.
fn output(mut command: Command) -> anyhow::Result<String> {
    let output = command
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("could not start {command:?}"))?;
    if !output.status.success() {
        bail!("{command:?} exited with {}", output.status);
    }
    String::from_utf8(output.stdout).with_context(|| format!("{command:?} printed non-UTF-8"))
}
