//! What every report shares: the command that produced it, the date, the machine and its
//! load, and the nearest-rank percentile its latency columns use.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};

/// The `cargo xtask` command line this run answers: the subcommands and options of
/// `memlayer-bench` are those of `cargo xtask bench`.
pub(crate) fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("cargo xtask bench {}", args.join(" "))
}

/// Prints a benchmark report's title and the lines every report starts with: the command,
/// the date, the machine and its load before and after the run.
pub(crate) fn print_run_header(
    title: &str,
    [load_before, load_after]: &[String; 2],
) -> anyhow::Result<()> {
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    println!("## {title}");
    println!();
    println!("- command: `{}`", command_line());
    println!("- date: {}", date()?);
    println!(
        "- machine: {cpus} CPUs (available parallelism), {} {}; load average (1 min) before / \
         after: {load_before} / {load_after} (the machine may be shared)",
        std::env::consts::OS,
        std::env::consts::ARCH
    );
    Ok(())
}

/// The date and time, UTC, to the second.
pub(crate) fn date() -> anyhow::Result<String> {
    let output = Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M:%S UTC"])
        .output()
        .context("could not run `date`")?;
    if !output.status.success() {
        bail!("`date` exited with {}", output.status);
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The multi-threaded tokio runtime a benchmark drives memlayer's async crates on.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("could not start the runtime")
}

/// The 1-minute load average, the first field of `/proc/loadavg`.
pub(crate) fn load_average() -> anyhow::Result<String> {
    let text = std::fs::read_to_string("/proc/loadavg").context("could not read /proc/loadavg")?;
    Ok(text
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned())
}

/// A field of this process's `/proc/self/status` counted in KiB (`VmRSS`, `VmHWM`).
pub(crate) fn own_status_kib(field: &str) -> anyhow::Result<u64> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("could not read /proc/self/status")?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse::<u64>().ok())
        .with_context(|| format!("no {field} in /proc/self/status"))
}

/// The nearest-rank percentile of sorted samples: the smallest sample that at least `p`
/// percent of all samples are less than or equal to (a measured value, never an
/// interpolation). `cargo xtask`'s HTTP benchmarks compute theirs the same way.
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    let last = sorted.len().checked_sub(1)?;
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.saturating_sub(1).min(last)])
}
