//! `cargo xtask bench all`: every benchmark in one run, and docs/benchmarks.md written from
//! what they printed. Each benchmark runs as a child process of this (release) xtask and
//! prints its markdown section on stdout; this adds the machine, the date, the command and the
//! load average around each one. The file's hand-written part — analysis and earlier runs,
//! below [`HAND_WRITTEN`] — is kept as it is.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::Context;

use super::load_average;
use crate::cmd;

/// The line that ends the generated part of docs/benchmarks.md; what follows is kept.
const HAND_WRITTEN: &str =
    "<!-- Everything above is written by `cargo xtask bench all`; edit below this line. -->";

/// One benchmark: its name in the summary and the arguments of its task, full and quick.
struct Benchmark {
    name: &'static str,
    full: &'static [&'static str],
    quick: &'static [&'static str],
}

const BENCHMARKS: [Benchmark; 7] = [
    Benchmark {
        name: "HTTP appends, context, recall and commit modes",
        full: &["bench", "appends", "--seconds", "10"],
        quick: &["bench", "appends", "--seconds", "3"],
    },
    Benchmark {
        name: "embedding throughput against Python onnxruntime",
        full: &["bench", "embed"],
        quick: &["bench", "embed"],
    },
    Benchmark {
        name: "vector index against the exact scan",
        full: &["bench", "index", "--sizes", "10000,100000"],
        quick: &["bench", "index", "--sizes", "10000", "--queries", "300"],
    },
    Benchmark {
        name: "context of a 1,000-turn session",
        full: &["bench", "context"],
        quick: &["bench", "context", "--iterations", "60"],
    },
    Benchmark {
        name: "long-term memory recall",
        full: &["bench", "memory", "--sizes", "10000,100000"],
        quick: &["bench", "memory", "--sizes", "10000", "--queries", "200"],
    },
    Benchmark {
        name: "purge of many conversations",
        full: &["bench", "purge", "--sessions", "100000"],
        quick: &["bench", "purge", "--sessions", "10000"],
    },
    Benchmark {
        name: "recovery time by store size",
        full: &["bench", "recovery", "--sizes-mib", "250,500,1000"],
        quick: &["bench", "recovery", "--sizes-mib", "100,200"],
    },
];

pub(crate) fn run(root: &Path, quick: bool) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("cannot find the running xtask")?;
    let started = date()?;
    let mut summary = String::new();
    let mut sections = String::new();
    for benchmark in &BENCHMARKS {
        let args = if quick {
            benchmark.quick
        } else {
            benchmark.full
        };
        eprintln!("xtask: bench all: {}", args.join(" "));
        let load_before = load_average()?;
        let start = Instant::now();
        let mut command = Command::new(&exe);
        command.args(args).current_dir(root);
        let output = cmd::output(command)
            .with_context(|| format!("`cargo xtask {}` failed", args.join(" ")))?;
        let minutes = start.elapsed().as_secs_f64() / 60.0;
        let _ = writeln!(
            summary,
            "| {} | `cargo xtask {}` | {minutes:.1} | {load_before} / {} |",
            benchmark.name,
            args.join(" "),
            load_average()?
        );
        let _ = writeln!(sections, "{}\n", output.trim_end());
    }
    let path = root.join("docs").join("benchmarks.md");
    let existing = std::fs::read_to_string(&path).unwrap_or_default();
    let kept = existing
        .split_once(HAND_WRITTEN)
        .map_or(existing.as_str(), |(_, after)| after);
    let command = if quick {
        "bench all --quick"
    } else {
        "bench all"
    };
    let mut text = String::new();
    let _ = writeln!(text, "# Benchmarks\n");
    let _ = writeln!(
        text,
        "Written by `cargo xtask {command}`, started {started}, finished {}. Machine: {}. \
         The machine is shared (other builds run beside the benchmarks), so the load average \
         is given with every benchmark; compare figures side by side within one run and quote \
         ratios across runs. Each section's targets come from the issues and its reference \
         (Python onnxruntime, the exact scan, the full history) ran in the same process or \
         beside it.\n",
        date()?,
        machine()?,
    );
    let _ = writeln!(
        text,
        "| benchmark | command | minutes | load average (1 min) before / after |"
    );
    let _ = writeln!(text, "| --- | --- | ---: | --- |");
    text.push_str(&summary);
    text.push('\n');
    text.push_str(&sections);
    text.push_str(HAND_WRITTEN);
    text.push_str(kept);
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("xtask: wrote {}", path.display());
    Ok(())
}

fn date() -> anyhow::Result<String> {
    let mut date = Command::new("date");
    date.args(["-u", "+%Y-%m-%d %H:%M UTC"]);
    Ok(cmd::output(date)?.trim().to_owned())
}

/// CPU model, cores and memory, from /proc.
fn machine() -> anyhow::Result<String> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").context("cannot read /proc/cpuinfo")?;
    let model = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .and_then(|rest| rest.split_once(':'))
        .map_or("unknown CPU", |(_, model)| model.trim());
    let meminfo = std::fs::read_to_string("/proc/meminfo").context("cannot read /proc/meminfo")?;
    let kib: u64 = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0);
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    Ok(format!(
        "{model}, {cores} cores available, {:.1} GiB RAM, {} {}",
        kib as f64 / (1024.0 * 1024.0),
        std::env::consts::OS,
        std::env::consts::ARCH
    ))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::BENCHMARKS;

    /// Every command `bench all` runs is a command of this xtask (the options of the
    /// in-process benchmarks go on to memlayer-bench, which checks them itself).
    #[test]
    fn every_benchmark_command_parses() {
        for benchmark in &BENCHMARKS {
            for args in [benchmark.full, benchmark.quick] {
                let argv = std::iter::once("xtask").chain(args.iter().copied());
                if let Err(error) = crate::Cli::try_parse_from(argv) {
                    panic!("`cargo xtask {}` does not parse: {error}", args.join(" "));
                }
            }
        }
    }
}
