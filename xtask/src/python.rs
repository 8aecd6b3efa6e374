//! The Python tools of the test steps (schemathesis, the OpenAI SDK, memlayer's own package
//! and what its tests import), each in a virtual environment under the target directory,
//! installed from a requirements file that pins every file by hash.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

use crate::cmd;

/// The virtual environment at `venv` with exactly what `requirements` pins: pip checks every
/// file against its hash, installs wheels only and nothing unpinned. It is made again from
/// scratch when the requirements changed since it was made, so nothing stale stays in it.
/// Answers its Python.
pub(crate) fn venv_with(venv: &Path, requirements: &Path) -> anyhow::Result<PathBuf> {
    let wanted = std::fs::read(requirements)
        .with_context(|| format!("could not read {}", requirements.display()))?;
    let installed = venv.join("installed-requirements.txt");
    let python = venv.join("bin").join("python3");
    if std::fs::read(&installed).is_ok_and(|done| done == wanted) && python.exists() {
        return Ok(python);
    }
    let _ = std::fs::remove_dir_all(venv);
    let mut create = Command::new("python3");
    create.args(["-m", "venv"]).arg(venv);
    cmd::run(create).context("could not create a virtual environment (python3 -m venv)")?;
    let mut pip = pip_install(&python);
    pip.args([
        "--require-hashes",
        "--no-deps",
        "--only-binary",
        ":all:",
        "-r",
    ])
    .arg(requirements);
    cmd::run(pip).with_context(|| format!("pip could not install {}", requirements.display()))?;
    std::fs::write(&installed, wanted)?;
    Ok(python)
}

/// `pip install`, quietly, with the virtual environment's `python`.
pub(crate) fn pip_install(python: &Path) -> Command {
    let mut pip = Command::new(python);
    pip.args([
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--quiet",
    ]);
    pip
}
