//! Debian packages the tests run on, installed with apt-get when missing, as on a fresh CI
//! machine (which runs as root): Node.js, npm and Chromium for the browser and clients'
//! tests (`browser::install_missing`), PostgreSQL for memlayer-postgres's tests.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

use crate::cmd;

/// Installs `packages` with apt-get; nothing when the list is empty.
pub(crate) fn install(packages: &[&str]) -> anyhow::Result<()> {
    if packages.is_empty() {
        return Ok(());
    }
    eprintln!("xtask: installing {} with apt-get", packages.join(" "));
    if !Path::new("/usr/bin/apt-get").exists() {
        bail!(
            "this is not a Debian system: install {} yourself",
            packages.join(" ")
        );
    }
    // A fresh machine may have no package lists yet.
    let mut update = Command::new("apt-get");
    update.arg("update");
    let mut install = Command::new("apt-get");
    install
        .args(["install", "-y", "--no-install-recommends"])
        .args(packages);
    for mut apt in [update, install] {
        apt.env("DEBIAN_FRONTEND", "noninteractive");
        cmd::run(apt).context("apt-get failed (it needs root)")?;
    }
    Ok(())
}

/// Installs Debian's `postgresql` unless its server programs are there. memlayer-postgres's
/// tests start a throwaway cluster with them, looking where this looks: the newest
/// `/usr/lib/postgresql/<version>/bin`, then `PATH`. Skipped when the tests are given a server
/// (`MEMLAYER_TEST_DATABASE_URL`).
pub(crate) fn install_postgres_if_missing() -> anyhow::Result<()> {
    if std::env::var_os("MEMLAYER_TEST_DATABASE_URL").is_some() {
        return Ok(());
    }
    let complete = |dir: &Path| {
        ["initdb", "pg_ctl", "postgres"]
            .iter()
            .all(|program| dir.join(program).is_file())
    };
    let versioned = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .any(|entry| complete(&entry.path().join("bin")));
    let on_path = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .any(|dir| complete(&dir));
    if versioned || on_path {
        return Ok(());
    }
    install(&["postgresql"])
}
