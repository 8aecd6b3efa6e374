//! Helper processes of the tests package (`fake-upstream`, `test-database`): each prints one
//! line saying what it serves, may answer one-line requests after it, and runs until its
//! standard input closes, which dropping a [`Helper`] does (or this process ending, whichever
//! way).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use anyhow::{Context, bail};

pub(crate) struct Helper {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// The first line it printed, without its end.
    pub(crate) line: String,
}

impl Helper {
    pub(crate) fn start(binary: &Path) -> anyhow::Result<Self> {
        let mut child = Command::new(binary)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("could not start {}", binary.display()))?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().context("stdout is piped")?);
        let mut helper = Self {
            child,
            stdin,
            stdout,
            line: String::new(),
        };
        match helper.read_line() {
            Ok(line) => {
                helper.line = line;
                Ok(helper)
            }
            Err(_) => bail!("{} exited before printing what it serves", binary.display()),
        }
    }

    /// A database of a throwaway PostgreSQL cluster (the tests package's `test-database`,
    /// built here), for a server under test to keep its records in; its first line is the
    /// connection string. Installs PostgreSQL when it is missing.
    pub(crate) fn test_database(root: &Path, target_dir: &Path) -> anyhow::Result<Self> {
        crate::apt::install_postgres_if_missing()?;
        crate::cmd::cargo(
            root,
            &["build", "-p", "memlayer-tests", "--bin", "test-database"],
        )?;
        Self::start(&target_dir.join("debug").join("test-database"))
    }

    /// Sends `request` as a line and answers the line the helper prints back.
    pub(crate) fn ask(&mut self, request: &str) -> anyhow::Result<String> {
        let stdin = self
            .stdin
            .as_mut()
            .context("the helper's input is closed")?;
        writeln!(stdin, "{request}")?;
        stdin.flush()?;
        self.read_line()
    }

    fn read_line(&mut self) -> anyhow::Result<String> {
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        if line.is_empty() {
            bail!("the helper exited");
        }
        line.truncate(line.trim_end().len());
        Ok(line)
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        // Closing its input asks it to stop; a kill is the fallback that never fails.
        drop(self.stdin.take());
        if self.child.wait().is_err() {
            let _ = self.child.kill();
        }
    }
}
