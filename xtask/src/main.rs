//! `cargo xtask`: the one entry point for the memlayer workspace's developer tasks — installing
//! the embedding assets (`setup`), the CI test run, starting the server, the structural checks
//! (`tidy`), the benchmarks (`bench`), the load and crash tests, the fuzz runs, the admin
//! page's browser test, the clients' tests (`clients`: the OpenAI SDKs and memlayer's Python
//! and TypeScript packages), the API contract test
//! (`contract`) and the release bundle (`dist`).
//! Tasks are plain Rust rather than shell scripts so they run the same on every machine and
//! are checked by the compiler like the rest of the workspace. xtask orchestrates: it builds
//! and runs the product (and memlayer-bench, the in-process benchmarks) as processes and
//! links no memlayer crate, so `cargo xtask tidy` compiles none of them (checked by `tidy`).

mod apt;
mod bench;
mod browser;
mod clients;
mod cmd;
mod contract;
mod crash;
mod dist;
mod fuzz;
mod helper;
mod load;
mod metadata;
mod python;
mod server;
mod setup;
mod tidy;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "Developer tasks for the memlayer workspace"
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install (or verify) ONNX Runtime and the embedding model in ./memlayer-assets.
    Setup,
    /// What CI runs: setup, rustfmt check, clippy with warnings denied, every test, the
    /// OpenAI SDKs' tests, the crash test, a 20-second pass of each fuzz target, the browser
    /// test, then the contract test.
    Test,
    /// Setup, then build and run the server in release mode; extra arguments go to
    /// `memlayer serve`.
    Serve {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Check the workspace's structure: module docs, crate names, layering, lints.
    Tidy,
    /// Run a benchmark and print its markdown report; `bench all` runs every one and writes
    /// docs/benchmarks.md.
    Bench {
        #[command(subcommand)]
        benchmark: bench::Benchmark,
    },
    /// Load over HTTP with auth on: clients playing turns (append, context, append), then
    /// many more clients appending against a small in-flight limit; checks that overload is
    /// refused fast and that no acknowledged append is lost.
    Load {
        /// Clients playing turns at once.
        #[arg(long, default_value_t = 64)]
        clients: usize,
        /// Clients appending at once in the overload phase.
        #[arg(long, default_value_t = 500)]
        overload_clients: usize,
        /// The server's --max-in-flight in the overload phase.
        #[arg(long, default_value_t = 64)]
        max_in_flight: usize,
        /// How long each phase runs.
        #[arg(long, default_value_t = 20)]
        seconds: u64,
    },
    /// Kill the real server with SIGKILL at random moments under a write, memory and erasure
    /// load, restart it, and check that nothing acknowledged is lost, duplicated or brought
    /// back from erasure.
    Crash {
        /// How many times the running server is killed.
        #[arg(long, default_value_t = 100)]
        kills: usize,
        /// Clients writing at once, besides the one that purges its own tenant.
        #[arg(long, default_value_t = 6)]
        clients: usize,
        /// Seed of every random choice (operations, texts, when to kill); a failure names it.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Run a release build of the server instead of the debug build the tests use.
        #[arg(long)]
        release: bool,
        /// Keep the records in a throwaway PostgreSQL cluster, which the run also stops at
        /// once (`pg_ctl stop -m immediate`) under load, with or without the server.
        #[arg(long)]
        postgres: bool,
    },
    /// Test the admin page in headless Chromium against the real server (installs Debian's
    /// chromium and the pinned playwright-core when missing).
    Browser,
    /// Run schemathesis (pinned, installed into target/contract) against the real server with
    /// each role's key and `--checks all`; fails on any finding.
    Contract {
        /// Examples generated per operation and phase.
        #[arg(long, default_value_t = CI_CONTRACT_EXAMPLES)]
        examples: u32,
        /// Only this operation (its `operationId`), with each key that may call it.
        #[arg(long)]
        operation: Option<String>,
    },
    /// Test the official OpenAI SDKs (Python, JavaScript) against the real server's
    /// OpenAI-compatible endpoint, with a fake model (installs the hash-pinned Python SDK
    /// into a virtual environment under the target directory, the npm one with `npm ci`),
    /// then memlayer's Python package, `clients/python`, installed with its hash-pinned test
    /// dependencies into a second virtual environment, and its TypeScript package,
    /// `clients/typescript` (`npm ci`, a check that its generated types match the server's
    /// /openapi.json, its build and its tests through ESM and CommonJS).
    Clients {
        /// Rewrite clients/typescript/src/generated/openapi.ts from the server's
        /// /openapi.json instead of failing when they differ, then run the tests with it.
        #[arg(long)]
        regenerate_ts: bool,
    },
    /// Build the release tarball: binary, embedding assets, README and SHA256SUMS.
    Dist,
    /// Build the cargo-fuzz targets in fuzz/ (installing cargo-fuzz if missing) and run each
    /// for a while; fails on any crash, hang or out-of-memory.
    Fuzz {
        /// How long each target runs.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
    },
}

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    let root = workspace_root();
    match cli.task {
        Task::Setup => {
            setup::run(&root)?;
        }
        Task::Test => test(&root)?,
        Task::Serve { args } => {
            setup::run(&root)?;
            let mut run_args = vec!["run", "--release", "-p", "memlayer", "--", "serve"];
            run_args.extend(args.iter().map(String::as_str));
            cmd::cargo(&root, &run_args)?;
        }
        Task::Tidy => {
            let violations = tidy::check(&root)?;
            if !violations.is_empty() {
                for violation in &violations {
                    eprintln!("{violation}");
                }
                eprintln!("tidy: {} problem(s) found", violations.len());
                return Ok(ExitCode::FAILURE);
            }
            println!("tidy: ok");
        }
        // A debug-built load generator or benchmark would measure itself rather than the
        // code under test: re-run the same task from a release build of xtask. (The
        // in-process benchmarks run a release build of memlayer-bench whatever xtask is.)
        Task::Load { .. } if cfg!(debug_assertions) => rerun_in_release(&root)?,
        Task::Bench { benchmark } if cfg!(debug_assertions) && benchmark.measures_in_xtask() => {
            rerun_in_release(&root)?;
        }
        Task::Bench { benchmark } => bench::run(&root, benchmark)?,
        Task::Crash {
            kills,
            clients,
            seed,
            release,
            postgres,
        } => crash::run(
            &root,
            &crash::Options {
                kills,
                clients,
                seed,
                release,
                postgres,
            },
        )?,
        Task::Load {
            clients,
            overload_clients,
            max_in_flight,
            seconds,
        } => load::run(
            &root,
            &load::Options {
                clients,
                overload_clients,
                max_in_flight,
                seconds,
            },
        )?,
        Task::Browser => {
            setup::run(&root)?;
            browser::run(&root)?;
        }
        Task::Contract {
            examples,
            operation,
        } => {
            setup::run(&root)?;
            let operation = operation.as_deref();
            contract::run(
                &root,
                &contract::Scope {
                    examples,
                    operation,
                },
            )?;
        }
        Task::Clients { regenerate_ts } => {
            let types = if regenerate_ts {
                clients::Types::Regenerate
            } else {
                clients::Types::Check
            };
            clients::run(&root, types)?;
        }
        Task::Dist => dist::run(&root)?,
        Task::Fuzz { seconds } => fuzz::run(&root, seconds)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Kills of the server in `cargo xtask test`'s crash test.
const CI_CRASH_KILLS: usize = 20;

/// Kills in `cargo xtask test`'s crash test on PostgreSQL (of the server, the database or
/// both).
const CI_POSTGRES_CRASH_KILLS: usize = 9;

/// Examples schemathesis generates per operation and phase, in CI and by default.
const CI_CONTRACT_EXAMPLES: u32 = 100;

/// Seconds each fuzz target runs in `cargo xtask test`.
const CI_FUZZ_SECONDS: u64 = 20;

/// Runs CI's steps in CI's order, cheapest first, so a formatting slip fails in seconds
/// rather than after a full build. Setup comes first because the embedding tests run the real
/// model; they find it through `MEMLAYER_ASSETS_DIR`.
fn test(root: &Path) -> anyhow::Result<()> {
    let assets = setup::run(root)?;
    let mut timings = StepTimings::default();
    let steps: [&[&str]; 3] = [
        &["fmt", "--all", "--", "--check"],
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        // The fuzz targets' entry points, compiled only with the `fuzzing` features.
        &[
            "clippy",
            "-p",
            "memlayer-store",
            "-p",
            "memlayer-index",
            "-p",
            "memlayer-server",
            "--features",
            "memlayer-store/fuzzing,memlayer-index/fuzzing,memlayer-server/fuzzing",
            "--",
            "-D",
            "warnings",
        ],
    ];
    let mut run_step = |args: &[&str], env: &[(&str, &str)]| {
        let settings: Vec<String> = env
            .iter()
            .map(|(name, value)| format!("{name}={value} "))
            .collect();
        let step = format!("{}cargo {}", settings.concat(), args.join(" "));
        eprintln!("xtask: running `{step}`");
        let mut command = cmd::cargo_command(root);
        command
            .args(args)
            .env("MEMLAYER_ASSETS_DIR", &assets)
            .envs(env.iter().copied());
        timings.time(&step, || cmd::run(command))
    };
    for args in steps {
        run_step(args, &[])?;
    }
    // memlayer-postgres's tests start a throwaway PostgreSQL cluster; a fresh machine has
    // none installed. After the checks, so a formatting slip still fails in seconds.
    apt::install_postgres_if_missing()?;
    run_step(&["test", "--workspace"], &[])?;
    // The end-to-end suite again, every server's records in a database of a throwaway
    // PostgreSQL cluster (`tests/support.rs`): the same API on both backends.
    run_step(
        &["test", "-p", "memlayer-tests", "--test", "e2e"],
        &[("MEMLAYER_E2E_BACKEND", "postgres")],
    )?;
    // The server as the official SDKs see it, after the end-to-end tests of its routes.
    timings.time("cargo xtask clients", || {
        clients::run(root, clients::Types::Check)
    })?;
    // The full run is `cargo xtask crash --release` (100 kills); CI's seed changes with every
    // run so that, over many runs, more interleavings are tried. A failure names its seed.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |elapsed| elapsed.as_secs());
    let options = crash::Options {
        kills: CI_CRASH_KILLS,
        clients: 6,
        seed,
        release: false,
        postgres: false,
    };
    timings.time("cargo xtask crash", || crash::run(root, &options))?;
    let on_postgres = crash::Options {
        kills: CI_POSTGRES_CRASH_KILLS,
        postgres: true,
        ..options
    };
    timings.time("cargo xtask crash --postgres", || {
        crash::run(root, &on_postgres)
    })?;
    // A short pass that catches what a change broke in the parsers and the store; the long
    // runs are `cargo xtask fuzz --seconds 600` (docs/fuzzing.md).
    timings.time("cargo xtask fuzz", || fuzz::run(root, CI_FUZZ_SECONDS))?;
    timings.time("cargo xtask browser", || browser::run(root))?;
    let everything = contract::Scope {
        examples: CI_CONTRACT_EXAMPLES,
        operation: None,
    };
    timings.time("cargo xtask contract", || contract::run(root, &everything))?;
    eprintln!("xtask: all steps passed");
    timings.report();
    Ok(())
}

/// How long each of CI's steps took, so that a run near CI's time limit shows where its
/// minutes went.
#[derive(Default)]
struct StepTimings(Vec<(String, std::time::Duration)>);

impl StepTimings {
    /// Runs `step`, noting its time; a failure names the step and its time.
    fn time(
        &mut self,
        name: &str,
        step: impl FnOnce() -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let started = std::time::Instant::now();
        let outcome = step();
        let took = started.elapsed();
        eprintln!("xtask: `{name}` took {:.0} s", took.as_secs_f64());
        self.0.push((name.to_owned(), took));
        outcome.with_context(|| format!("CI step `{name}` failed"))
    }

    fn report(&self) {
        let total: std::time::Duration = self.0.iter().map(|(_, took)| *took).sum();
        eprintln!("xtask: step times (total {:.0} s):", total.as_secs_f64());
        for (name, took) in &self.0 {
            eprintln!("xtask:   {:>5.0} s  {name}", took.as_secs_f64());
        }
    }
}

/// Runs this xtask invocation again, with the same arguments, from a release build.
fn rerun_in_release(root: &Path) -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut run_args = vec!["run", "--quiet", "--release", "-p", "xtask", "--"];
    run_args.extend(args.iter().map(String::as_str));
    cmd::cargo(root, &run_args)
}

/// The workspace root is the parent of this crate's folder; it is fixed at compile time so
/// every task behaves the same whatever directory `cargo xtask` is started from.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}
