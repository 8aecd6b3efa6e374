//! `cargo xtask browser`: the admin page's test in a real browser. It installs what the test
//! needs when missing (Debian's `chromium`, Node.js with npm, and `playwright-core` from the
//! committed lock file), starts the real server (debug build, empty data directory), and runs
//! `xtask/browser/admin.test.mjs` against it, which seeds sessions through the API and drives
//! the page in headless Chromium. Screenshots and the server's log land in
//! `target/browser-artifacts/`.
//!
//! Playwright drives the browser rather than a DevTools-protocol client written here: its
//! locators find elements by role and label (what the page promises assistive technology)
//! and wait for asynchronous updates, which a hand-written protocol client would have to
//! re-implement. Only `playwright-core` is installed — the driver without the browsers it
//! would download — and it runs Debian's Chromium, so nothing is fetched at test time beyond
//! the pinned npm package.

use std::path::Path;
use std::process::Command;

use anyhow::Context;

use crate::cmd;
use crate::metadata;
use crate::server::{ADMIN_KEY, Server};

/// Debian's Chromium, the browser the test runs.
const CHROMIUM: &str = "/usr/bin/chromium";

pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    install_missing(true)?;
    let tests = root.join("xtask").join("browser");
    // `npm ci` installs exactly the lock file's versions, and refuses a lock file that no
    // longer matches package.json.
    let mut npm = Command::new("npm");
    npm.current_dir(&tests)
        .args(["ci", "--no-audit", "--no-fund"]);
    cmd::run(npm).context("`npm ci` failed in xtask/browser")?;

    cmd::cargo(root, &["build", "-p", "memlayer"])?;
    let target = metadata::read(root)?.target_directory;
    let binary = target.join("debug").join("memlayer");
    let artifacts = target.join("browser-artifacts");
    // Screenshots of an earlier run would be mistaken for this one's.
    let _ = std::fs::remove_dir_all(&artifacts);
    std::fs::create_dir_all(&artifacts)?;
    let data = tempfile::Builder::new()
        .prefix("memlayer-browser-")
        .tempdir()
        .context("could not create the data directory")?;
    let server = Server::start(&binary, data.path(), &artifacts.join("server.log"))?;

    let mut node = Command::new("node");
    node.current_dir(&tests)
        .arg("admin.test.mjs")
        .env("MEMLAYER_URL", format!("http://{}", server.addr()))
        .env("MEMLAYER_ADMIN_KEY", ADMIN_KEY)
        .env("CHROMIUM", CHROMIUM)
        .env("ARTIFACTS_DIR", &artifacts);
    let outcome = cmd::run(node);
    // The test's failure says more than a failed shutdown after it, so it is reported first.
    let stopped = server.stop();
    outcome.with_context(|| {
        format!(
            "the admin page's browser test failed; screenshots and the server log are in {}",
            artifacts.display()
        )
    })?;
    stopped?;
    eprintln!(
        "xtask: browser test passed; screenshots in {}",
        artifacts.display()
    );
    Ok(())
}

/// Installs what a test runs on when it is missing, as on a fresh CI machine: Node.js with
/// npm (Debian's are recent enough for playwright-core and the OpenAI SDK), and Debian's
/// `chromium` when `chromium` is asked for.
pub(crate) fn install_missing(chromium: bool) -> anyhow::Result<()> {
    let mut packages = Vec::new();
    if chromium && !Path::new(CHROMIUM).exists() {
        packages.push("chromium");
    }
    let npm_runs = Command::new("npm")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    if !npm_runs {
        packages.extend(["nodejs", "npm"]);
    }
    crate::apt::install(&packages)
}
