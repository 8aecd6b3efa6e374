//! The slice of `cargo metadata` that the tasks read: the workspace's packages with their
//! declared dependencies, and the target directory. Parsed with serde rather than the
//! `cargo_metadata` crate because these few fields are all xtask needs.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

use crate::cmd;

#[derive(Deserialize)]
pub(crate) struct Metadata {
    pub(crate) packages: Vec<Package>,
    /// Where cargo puts build output; honours `CARGO_TARGET_DIR` and cargo config, so the
    /// benchmark finds the binary that `cargo build` just wrote.
    pub(crate) target_directory: PathBuf,
}

#[derive(Deserialize)]
pub(crate) struct Package {
    pub(crate) name: String,
    pub(crate) manifest_path: PathBuf,
    pub(crate) dependencies: Vec<Dependency>,
}

#[derive(Deserialize)]
pub(crate) struct Dependency {
    /// The package name, even when the dependency is renamed in the manifest.
    pub(crate) name: String,
    /// `None` for normal dependencies, `Some("dev")` or `Some("build")` otherwise.
    pub(crate) kind: Option<String>,
}

impl Dependency {
    pub(crate) fn kind_name(&self) -> &str {
        self.kind.as_deref().unwrap_or("normal")
    }
}

/// Reads the workspace's own packages; `--no-deps` keeps it fast and offline because it
/// skips resolving the dependency graph.
pub(crate) fn read(root: &Path) -> anyhow::Result<Metadata> {
    let mut command = cmd::cargo_command(root);
    command.args(["metadata", "--format-version", "1", "--no-deps"]);
    let json = cmd::output(command)?;
    serde_json::from_str(&json).context("could not parse `cargo metadata` output")
}
