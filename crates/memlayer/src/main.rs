//! `memlayer`, the single binary: the HTTP server (`memlayer serve`) and, as later issues add
//! them, the operator commands. It owns the command line, the configuration file and
//! environment variables, logging set-up and signal handling, and turns them into calls on
//! the library crates. Nothing depends on it.

mod config;

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use memlayer_server::AppState;
use memlayer_store::Store;
use tracing_subscriber::EnvFilter;

use crate::config::{ServeArgs, Settings};

/// Self-hosted memory layer for LLM agents: durable sessions, context under a token budget,
/// and forgetting on request.
#[derive(Parser)]
#[command(name = "memlayer", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP API server.
    ///
    /// Settings come from, in order of precedence: command-line flags, MEMLAYER_* environment
    /// variables, the TOML file given by --config, and the built-in defaults
    /// (127.0.0.1:7700, ./memlayer-data).
    ///
    /// Examples:
    ///   memlayer serve
    ///   memlayer serve --listen 0.0.0.0:7700 --data-dir /var/lib/memlayer
    ///   MEMLAYER_DATA_DIR=/srv/memlayer memlayer serve --config /etc/memlayer.toml
    Serve(ServeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let outcome = match cli.command {
        Command::Serve(args) => Settings::resolve(args).and_then(serve),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("memlayer: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(settings: Settings) -> anyhow::Result<()> {
    std::fs::create_dir_all(&settings.data_dir).with_context(|| {
        format!(
            "cannot create the data directory {}",
            settings.data_dir.display()
        )
    })?;
    let store_path = settings.data_dir.join("memlayer.redb");
    let store = Store::open(&store_path)
        .with_context(|| format!("cannot open the store {}", store_path.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        // Installed before the listening line is printed, so a signal sent as soon as the
        // server is reachable is already a graceful shutdown.
        let shutdown = shutdown_signal().context("cannot install signal handlers")?;
        let listener = tokio::net::TcpListener::bind(settings.listen)
            .await
            .with_context(|| format!("cannot listen on {}", settings.listen))?;
        let address = listener.local_addr()?;
        // Scripts and tests read these two lines to find the server and its data.
        println!("memlayer listening on http://{address}");
        println!("memlayer data in {}", store_path.display());
        tracing::info!(%address, store = %store_path.display(), "serving");
        let state = AppState::new(store, settings.server);
        memlayer_server::serve(listener, state, shutdown)
            .await
            .context("the server failed")?;
        println!("memlayer stopped; every acknowledged write is committed");
        Ok(())
    })
}

/// Registers for ctrl-c and SIGTERM now and returns a future that resolves on either.
#[cfg(unix)]
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {},
            _ = terminate.recv() => {},
        }
        tracing::info!("shutting down: finishing in-flight requests and committing queued writes");
    })
}

/// Registers for ctrl-c and returns a future that resolves on it.
#[cfg(not(unix))]
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down: finishing in-flight requests and committing queued writes");
    })
}
