//! `cargo xtask fuzz`: builds the cargo-fuzz targets of `fuzz/` and runs each one for a fixed
//! time, failing on the first crash, hang or out-of-memory it finds.
//!
//! CI machines have only a stable toolchain, which is enough: with the sanitizer off
//! (`-s none`) cargo-fuzz passes only stable `-C` flags (it adds `-Z` flags for a sanitizer,
//! `--build-std` or `--careful`, none of which is used). No sanitizer is lost that matters
//! here: the workspace forbids `unsafe`, so the targets look for panics (overflow included:
//! they are built with debug assertions), hangs and unbounded allocations.

use std::fs::File;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

use crate::cmd;

/// The cargo-fuzz release installed when none is found, built from its lock file.
const CARGO_FUZZ_VERSION: &str = "0.13.1";
/// A single input slower than this is a hang.
const TIMEOUT_SECS: u64 = 10;
/// An input that makes a target use more memory than this is an out-of-memory bug.
const RSS_LIMIT_MB: u64 = 2048;

/// What one target did in its run.
struct Outcome {
    target: String,
    runs: u64,
    seconds: u64,
}

/// Installs cargo-fuzz if needed, builds every target and fuzzes each for `seconds`.
pub(crate) fn run(root: &Path, seconds: u64) -> anyhow::Result<()> {
    install_cargo_fuzz(root)?;
    let fuzz = root.join("fuzz");
    // `fuzz/` is outside the main workspace, so `cargo fmt --all` and clippy do not see it.
    let mut format = cmd::cargo_command(root);
    format
        .current_dir(&fuzz)
        .args(["fmt", "--all", "--", "--check"]);
    cmd::run(format).context("the fuzz targets are not formatted: run `cargo fmt` in fuzz/")?;
    let mut build = fuzz_command(root);
    build.args(["build", "-s", "none"]);
    cmd::run(build).context("building the fuzz targets failed")?;

    let mut list = fuzz_command(root);
    list.arg("list");
    let targets = cmd::output(list)?;
    let mut outcomes = Vec::new();
    for target in targets.lines().map(str::trim).filter(|t| !t.is_empty()) {
        outcomes.push(run_target(root, &fuzz, target, seconds)?);
    }
    println!("\n| target | seconds | executions | crashes |\n|---|---:|---:|---:|");
    for outcome in &outcomes {
        println!(
            "| `{}` | {} | {} | 0 |",
            outcome.target, outcome.seconds, outcome.runs
        );
    }
    Ok(())
}

/// `cargo fuzz` in `fuzz/`.
fn fuzz_command(root: &Path) -> Command {
    let mut command = cmd::cargo_command(root);
    command.current_dir(root.join("fuzz")).arg("fuzz");
    command
}

fn install_cargo_fuzz(root: &Path) -> anyhow::Result<()> {
    let mut version = cmd::cargo_command(root);
    version
        .args(["fuzz", "--version"])
        .stdout(std::process::Stdio::piped());
    let installed = version
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).into_owned());
    if installed.is_some_and(|text| text.contains(CARGO_FUZZ_VERSION)) {
        return Ok(());
    }
    eprintln!("xtask: installing cargo-fuzz {CARGO_FUZZ_VERSION}");
    cmd::cargo(
        root,
        &[
            "install",
            "cargo-fuzz",
            "--locked",
            "--version",
            CARGO_FUZZ_VERSION,
        ],
    )
}

/// Fuzzes `target` for `seconds`, growing its corpus (`fuzz/corpus/<target>`, not committed)
/// from the committed seeds (`fuzz/seeds/<target>`). libFuzzer's output goes to
/// `fuzz/artifacts/<target>.log`; a crash leaves its input in `fuzz/artifacts/<target>/`.
fn run_target(root: &Path, fuzz: &Path, target: &str, seconds: u64) -> anyhow::Result<Outcome> {
    let corpus = fuzz.join("corpus").join(target);
    let seeds = fuzz.join("seeds").join(target);
    let artifacts = fuzz.join("artifacts");
    std::fs::create_dir_all(&corpus)?;
    std::fs::create_dir_all(&artifacts)?;
    let log_path = artifacts.join(format!("{target}.log"));
    let log = File::create(&log_path)?;
    eprintln!("xtask: fuzzing `{target}` for {seconds} s");
    let mut command = fuzz_command(root);
    command
        .args(["run", "-s", "none", target])
        .arg(&corpus)
        .args(seeds.is_dir().then_some(&seeds))
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!("-timeout={TIMEOUT_SECS}"))
        .arg(format!("-rss_limit_mb={RSS_LIMIT_MB}"))
        .stdout(log.try_clone()?)
        .stderr(log);
    let status = command
        .status()
        .with_context(|| format!("could not start {command:?}"))?;
    let output = std::fs::read_to_string(&log_path).unwrap_or_default();
    if !status.success() {
        let tail: Vec<&str> = output.lines().rev().take(40).collect();
        for line in tail.iter().rev() {
            eprintln!("{line}");
        }
        bail!(
            "fuzz target `{target}` failed ({status}); the input is in {} and the log in {}",
            artifacts.join(target).display(),
            log_path.display()
        );
    }
    // libFuzzer ends with "Done <runs> runs in <seconds> second(s)".
    let (runs, seconds) = output
        .lines()
        .rev()
        .find_map(|line| {
            let rest = line.strip_prefix("Done ")?;
            let mut words = rest.split_whitespace();
            let runs = words.next()?.parse().ok()?;
            let seconds = words.nth(2)?.parse().ok()?;
            Some((runs, seconds))
        })
        .with_context(|| format!("no summary in {}", log_path.display()))?;
    eprintln!("xtask: `{target}`: {runs} executions in {seconds} s, no crash");
    Ok(Outcome {
        target: target.to_owned(),
        runs,
        seconds,
    })
}
