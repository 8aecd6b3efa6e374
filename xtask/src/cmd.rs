//! Running child processes: the nested `cargo` invocations every task is built from, and
//! small commands whose output a task reads.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

/// The `cargo` that started xtask (cargo sets `$CARGO` for what it runs), so nested builds
/// use the same toolchain even when another one comes first on `PATH`.
pub(crate) fn cargo_command(root: &Path) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut command = Command::new(cargo);
    command.current_dir(root);
    command
}

/// Runs `cargo ARGS` in the workspace root with its output streamed to the terminal.
pub(crate) fn cargo(root: &Path, args: &[&str]) -> anyhow::Result<()> {
    let mut command = cargo_command(root);
    command.args(args);
    run(command)
}

/// Runs a command to completion with inherited standard streams, failing on a non-zero exit.
pub(crate) fn run(mut command: Command) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("could not start {command:?}"))?;
    if !status.success() {
        bail!("{command:?} exited with {status}");
    }
    Ok(())
}

/// Runs a command and returns its standard output; its standard error is passed through so
/// a failure explains itself.
pub(crate) fn output(mut command: Command) -> anyhow::Result<String> {
    let output = command
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("could not start {command:?}"))?;
    if !output.status.success() {
        bail!("{command:?} exited with {}", output.status);
    }
    String::from_utf8(output.stdout).with_context(|| format!("{command:?} printed non-UTF-8"))
}
