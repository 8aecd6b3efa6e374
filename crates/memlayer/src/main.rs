//! `memlayer`, the single binary: the HTTP server (`memlayer serve`), the operator commands
//! (`memlayer reindex`) and the offline evaluations (`memlayer eval`). It owns the command line, the configuration file and
//! environment variables, logging set-up and signal handling, and turns them into calls on
//! the library crates. Nothing depends on it.

mod config;
mod eval;

/// The store file inside the data directory.
const STORE_FILE: &str = "memlayer.redb";
/// The vector index snapshot inside the data directory.
const SNAPSHOT_FILE: &str = "vectors.idx";

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use memlayer_embed::{Embedder, EmbedderOptions};
use memlayer_index::{Recall, RecallOptions};
use memlayer_server::AppState;
use memlayer_store::Store;
use tracing_subscriber::EnvFilter;

use crate::config::{DataArgs, ServeArgs, Settings};

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
    #[command(verbatim_doc_comment)]
    Serve(ServeArgs),
    /// Drop every stored vector and queue every message to be embedded again.
    ///
    /// Needed after the embedding model changed: the store refuses to mix vectors of two
    /// models, and `memlayer serve` refuses to start until this has run. The next
    /// `memlayer serve` embeds the messages in the background while it already answers.
    ///
    /// Example:
    ///   memlayer reindex --data-dir /var/lib/memlayer
    #[command(verbatim_doc_comment)]
    Reindex(DataArgs),
    /// Measure retrieval and context quality offline, with the real store and model.
    #[command(subcommand)]
    Eval(eval::EvalCommand),
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
        Command::Reindex(args) => args.data_dir().and_then(|dir| reindex(&dir)),
        Command::Eval(command) => eval::run(command),
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
    let store_path = settings.data_dir.join(STORE_FILE);
    let store = Store::open(&store_path)
        .with_context(|| format!("cannot open the store {}", store_path.display()))?;
    settings.assets.check()?;
    let embedder = Embedder::open(&settings.assets, EmbedderOptions::default())
        .context("cannot load the embedding model")?;
    let options = RecallOptions::default().with_snapshot(settings.data_dir.join(SNAPSHOT_FILE));
    let recall = Recall::open(store.clone(), embedder, options)
        .context("cannot build the recall indexes")?;
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
        let state = AppState::new(store, recall, settings.server);
        memlayer_server::serve(listener, state, shutdown)
            .await
            .context("the server failed")?;
        println!("memlayer stopped; every acknowledged write is committed");
        Ok(())
    })
}

fn reindex(data_dir: &std::path::Path) -> anyhow::Result<()> {
    let store_path = data_dir.join(STORE_FILE);
    anyhow::ensure!(
        store_path.is_file(),
        "no store at {}: nothing to reindex",
        store_path.display()
    );
    let store = Store::open(&store_path)
        .with_context(|| format!("cannot open the store {}", store_path.display()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .context("cannot start the async runtime")?;
    let queued = runtime.block_on(store.reset_embeddings())?;
    store.shutdown();
    // The snapshot describes the dropped vectors; the next start rebuilds it.
    match std::fs::remove_file(data_dir.join(SNAPSHOT_FILE)) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
            return Err(err).context("cannot remove the vector index snapshot");
        }
        _ => {}
    }
    println!(
        "memlayer: dropped every vector and queued {queued} message(s); the next `memlayer serve` embeds them"
    );
    Ok(())
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
