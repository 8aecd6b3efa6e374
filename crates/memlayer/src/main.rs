//! `memlayer`, the single binary: the HTTP server (`memlayer serve`), the operator commands
//! on a data directory (`memlayer keys`, `memlayer reindex`, `memlayer check`,
//! `memlayer verify-erasure`) and against a running server (`memlayer stats`, `purge`,
//! `backup`, `export`, `import`), the agent tools over MCP on stdio (`memlayer mcp`, a
//! bridge to a running server) and the offline evaluations
//! (`memlayer eval`). It owns the command line, the configuration file and
//! environment variables, logging set-up and signal handling, and turns them into calls on
//! the library crates. Nothing depends on it.

mod check;
mod config;
mod eval;
mod keys;
mod mcp;
mod remote;
mod transfer;

/// The store file inside the data directory.
const STORE_FILE: &str = "memlayer.redb";
/// The vector index snapshot inside the data directory.
const SNAPSHOT_FILE: &str = "vectors.idx";
/// This node's name on a database several nodes share (see [`node_id`]).
const NODE_ID_FILE: &str = "node-id";

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use memlayer_embed::{Embedder, EmbedderOptions};
use memlayer_index::{Recall, RecallOptions};
use memlayer_postgres::PgStore;
use memlayer_server::AppState;
use memlayer_store::{Store, StoreOptions};
use tracing_subscriber::EnvFilter;

use crate::config::{DataArgs, ServeArgs, Settings};

/// Log targets held below the levels at which they log what clients sent, whatever
/// `RUST_LOG` asks for (a later directive for the same target replaces the user's): the MCP
/// SDK logs every tool call and result at debug and some warnings with the peer's message,
/// and axum logs each rejected body's parse error, which quotes the body, at trace.
const QUIET_TARGETS: [&str; 2] = ["rmcp=error", "axum::rejection=off"];

/// What `memlayer --version` prints after the name: the release and the commit it was built
/// from (see `build.rs`).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("MEMLAYER_COMMIT"),
    ")"
);

/// Self-hosted memory layer for LLM agents: durable sessions, context under a token budget,
/// and forgetting on request.
#[derive(Parser)]
#[command(name = "memlayer", version = VERSION, propagate_version = true)]
struct Cli {
    /// How log lines on stderr look: `text` for people, `json` (one object per line, with
    /// the request's span fields) for a log collector. The level comes from RUST_LOG
    /// [default: info]. Logs name routes by template and hold no ids clients chose and no
    /// content.
    #[arg(
        long,
        global = true,
        env = "MEMLAYER_LOG_FORMAT",
        value_enum,
        default_value_t
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Default, clap::ValueEnum)]
enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP API server.
    ///
    /// Settings come from, in order of precedence: command-line flags, MEMLAYER_* environment
    /// variables, the TOML file given by --config, and the built-in defaults
    /// (127.0.0.1:7700, ./memlayer-data).
    ///
    /// Every /v1 request needs an API key (Authorization: Bearer <key>). The admin key comes
    /// from MEMLAYER_ADMIN_KEY or the config file's admin_key (a tenant_admin key of tenant
    /// "default", at least 32 characters: `openssl rand -hex 32`); without one, the first
    /// start on an empty store generates an admin key and prints it once on stdout.
    ///
    /// Examples:
    ///   memlayer serve
    ///   memlayer serve --listen 0.0.0.0:7700 --data-dir /var/lib/memlayer
    ///   MEMLAYER_DATA_DIR=/srv/memlayer memlayer serve --config /etc/memlayer.toml
    #[command(verbatim_doc_comment)]
    Serve(Box<ServeArgs>),
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
    /// Scan the store and the vector index snapshot for a text that was erased.
    ///
    /// Reads the files byte by byte (it works while the server runs) and prints every
    /// occurrence; exits with status 1 if there is any. Plant a unique canary in a message,
    /// erase it, and run this to see that nothing of it survived.
    ///
    /// Example:
    ///   memlayer verify-erasure --data-dir /var/lib/memlayer --text canary-5b1e77d0
    #[command(verbatim_doc_comment)]
    VerifyErasure(VerifyArgs),
    /// Check a data directory with the server stopped: the store opens with its page
    /// checksums verified, and the vector index a start would use holds exactly the stored
    /// vectors, each among its own ten nearest. Exits with status 1 if not.
    ///
    /// Example:
    ///   memlayer check --data-dir /var/lib/memlayer
    #[command(verbatim_doc_comment)]
    Check(check::CheckArgs),
    /// Show a running server's conversation stats for the key's tenant: how many, and the
    /// least recently active; and the store's disk space: free, in all, taken by the store.
    ///
    /// Needs a tenant_admin key in MEMLAYER_KEY.
    ///
    /// Example:
    ///   MEMLAYER_KEY=mlk_… memlayer stats --url http://127.0.0.1:7700
    #[command(verbatim_doc_comment)]
    Stats(remote::StatsArgs),
    /// Erase every conversation of the key's tenant inactive for more than N days, on a
    /// running server, with everything derived from them; prints the erasure receipt's counts.
    ///
    /// Needs a tenant_admin key in MEMLAYER_KEY. --older-than-days 0 erases every
    /// conversation and must be confirmed with --confirm "DELETE ALL".
    ///
    /// Examples:
    ///   MEMLAYER_KEY=mlk_… memlayer purge --older-than-days 90
    ///   MEMLAYER_KEY=mlk_… memlayer purge --older-than-days 0 --confirm "DELETE ALL"
    #[command(verbatim_doc_comment)]
    Purge(remote::PurgeArgs),
    /// Save a consistent backup of a running server's whole store to a file.
    ///
    /// The server copies what was committed when the request began while it goes on
    /// serving; the file is checked (it opens as a store, checksums verified) before it
    /// takes its name. It holds every tenant's data, so it needs an operator key in
    /// MEMLAYER_KEY (no tenant's key, not even the admin key): create one on the data
    /// directory, with the server stopped, with `memlayer keys create --role operator`. To
    /// restore, stop the server and copy the file to DATA_DIR/memlayer.redb (the vector index
    /// is rebuilt at start).
    ///
    /// Examples:
    ///   memlayer keys create --role operator --name backups --data-dir /var/lib/memlayer
    ///   MEMLAYER_KEY=mlk_… memlayer backup --out /backups/memlayer-2026-11-23.redb
    #[command(verbatim_doc_comment)]
    Backup(remote::BackupArgs),
    /// Export the key's tenant, or one user, from a running server as JSON Lines: every
    /// session with all its messages and runs, then each user's memories and episodes.
    ///
    /// Needs a tenant_admin or service key in MEMLAYER_KEY. Derived data (vectors,
    /// summaries, entities) is not exported; the importing server derives it again.
    ///
    /// Examples:
    ///   MEMLAYER_KEY=mlk_… memlayer export --out tenant.jsonl
    ///   MEMLAYER_KEY=mlk_… memlayer export --user alice > alice.jsonl
    #[command(verbatim_doc_comment)]
    Export(transfer::ExportArgs),
    /// Import what `memlayer export` wrote into a running server (the key's tenant).
    ///
    /// Safe to run again: messages are appended with idempotency keys, runs keep their ids,
    /// memories are remembered (a repeat updates instead of copying), and episodes already
    /// there are skipped. A session id that exists with another owner stops the import.
    ///
    /// Example:
    ///   MEMLAYER_KEY=mlk_… memlayer import --in tenant.jsonl --url http://new-host:7700
    #[command(verbatim_doc_comment)]
    Import(transfer::ImportArgs),
    /// Create, list and revoke API keys in the data directory (with the server stopped: it
    /// holds the store file; while it runs, use /v1/keys).
    ///
    /// Examples:
    ///   memlayer keys create --tenant acme --role service --name "support bot"
    ///   memlayer keys list --data-dir /var/lib/memlayer
    ///   memlayer keys revoke 6d2cc89e7d2c2d86
    #[command(subcommand, verbatim_doc_comment)]
    Keys(keys::KeysCommand),
    /// Serve the agent tools (memory_remember, memory_recall, memory_forget, session_search,
    /// clear_session) to an MCP host on stdin and stdout, for one session.
    ///
    /// A bridge to a running `memlayer serve`: every message goes to the server's
    /// /v1/sessions/{session}/mcp with the key, so the server must be running (it holds the
    /// data directory). MCP hosts that speak streamable HTTP can use that URL directly.
    ///
    /// The key is better given in MEMLAYER_KEY than with --key, which other local users
    /// can see in the process list.
    ///
    /// Example (an MCP host's server entry runs this command, with MEMLAYER_KEY set):
    ///   memlayer mcp --url http://127.0.0.1:7700 --session support-4711
    #[command(verbatim_doc_comment)]
    Mcp(mcp::McpArgs),
    /// Measure retrieval and context quality offline, with the real store and model.
    ///
    /// Examples:
    ///   memlayer eval planted
    ///   memlayer eval recall --locomo locomo10.json --k 5,10
    #[command(subcommand, verbatim_doc_comment)]
    Eval(eval::EvalCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    for directive in QUIET_TARGETS {
        filter = filter.add_directive(directive.parse().expect("a valid directive"));
    }
    // Colour codes only for a person at a terminal: stderr sent to a file or a journal would
    // otherwise be full of escape sequences.
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
    let outcome = match cli.command {
        Command::Serve(args) => Settings::resolve(*args).and_then(serve),
        Command::Reindex(args) => args.data_dir().and_then(|dir| reindex(&dir)),
        Command::VerifyErasure(args) => verify_erasure(&args),
        Command::Check(args) => check::run(args),
        Command::Eval(command) => eval::run(command),
        Command::Keys(command) => keys::run(command),
        Command::Stats(args) => remote::stats(&args),
        Command::Purge(args) => remote::purge(&args),
        Command::Backup(args) => remote::backup(&args),
        Command::Export(args) => transfer::export(&args),
        Command::Import(args) => transfer::import(&args),
        Command::Mcp(args) => mcp::run(args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("memlayer: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(mut settings: Settings) -> anyhow::Result<()> {
    std::fs::create_dir_all(&settings.data_dir).with_context(|| {
        format!(
            "cannot create the data directory {}",
            settings.data_dir.display()
        )
    })?;
    if settings.database_url.is_some() {
        settings.server.node_id = Some(node_id(&settings.data_dir)?);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let (store, location) = open_store(&settings, &runtime)?;
    settings.assets.check()?;
    let embedder = Embedder::open(&settings.assets, EmbedderOptions::default())
        .context("cannot load the embedding model")?;
    let mut options = RecallOptions::default()
        .with_snapshot(settings.data_dir.join(SNAPSHOT_FILE))
        .with_keywords_in_background();
    options.snapshot_interval = settings.snapshot_interval;
    if let Some(node_id) = &settings.server.node_id {
        options = options.with_node_id(node_id);
    }
    // In the runtime's context: a store in PostgreSQL answers the synchronous reads that
    // building the indexes makes through it.
    let recall = {
        let _runtime = runtime.enter();
        Recall::open(store.clone(), embedder, options).context("cannot build the recall indexes")?
    };
    runtime.block_on(async {
        // Installed before the listening line is printed, so a signal sent as soon as the
        // server is reachable is already a graceful shutdown.
        let shutdown = shutdown_signal().context("cannot install signal handlers")?;
        let admin_key = settings.admin_key.as_ref().map(config::Secret::expose);
        let listener = tokio::net::TcpListener::bind(settings.listen)
            .await
            .with_context(|| format!("cannot listen on {}", settings.listen))?;
        let address = listener.local_addr()?;
        // Scripts and tests read these two lines to find the server and its data.
        println!("memlayer listening on http://{address}");
        println!("memlayer data in {location}");
        // After those two lines: a generated admin key is printed once, here.
        keys::bootstrap(&store, admin_key).await?;
        tracing::info!(%address, store = %location, "serving");
        let state = AppState::new(store, recall, settings.server)
            .context("cannot build the long-term memory indexes")?;
        memlayer_server::serve(listener, state, shutdown)
            .await
            .context("the server failed")?;
        println!("memlayer stopped; every acknowledged write is committed");
        Ok(())
    })
}

/// This node's name on a database several nodes share, in erasure jobs' leases and among the
/// followers of the embedding outbox, kept in the data directory so that a restarted node
/// resumes its own interrupted erasures at once (`ServerConfig::node_id`) and replaces its own
/// follower record (`RecallOptions::node_id`); made (random) at the first start.
fn node_id(data_dir: &std::path::Path) -> anyhow::Result<String> {
    let path = data_dir.join(NODE_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_owned()),
        Ok(_) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(err).with_context(|| format!("cannot read {}", path.display())),
    }
    let id = uuid::Uuid::new_v4().simple().to_string();
    // Written, then renamed: a crash leaves no file, or one the next start reads (an empty
    // one, unsynced before a power cut, is replaced as a missing one is).
    let written = path.with_extension("tmp");
    std::fs::write(&written, &id)
        .and_then(|()| std::fs::rename(&written, &path))
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(id)
}

/// The store `serve` keeps its records in, and where that is for people to read: the
/// PostgreSQL database when one is configured, else the store file in the data directory.
fn open_store(
    settings: &Settings,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<(Store, String)> {
    let Some(url) = &settings.database_url else {
        let path = settings.data_dir.join(STORE_FILE);
        let options = StoreOptions::default().with_cache_bytes(settings.store_cache_bytes);
        let started = std::time::Instant::now();
        let store = Store::open_with(&path, options)
            .with_context(|| format!("cannot open the store {}", path.display()))?;
        if let Some(check) = store.open_check() {
            tracing::info!(
                %check,
                millis = started.elapsed().as_millis(),
                "store file opened"
            );
        }
        return Ok((store, path.display().to_string()));
    };
    let node_id = settings.server.node_id.as_deref();
    let name = match node_id {
        Some(node_id) => format!("memlayer {node_id}"),
        None => "memlayer".to_owned(),
    };
    open_database(url, runtime, &name, node_id)
}

/// The store in the PostgreSQL database at `url` (migrated first), its connections named
/// `application_name`, serving the node `node_id` when there is one (`PgStore::for_node`),
/// and where that is for people to read (never the user or a password).
fn open_database(
    url: &config::Secret,
    runtime: &tokio::runtime::Runtime,
    application_name: &str,
    node_id: Option<&str>,
) -> anyhow::Result<(Store, String)> {
    let location = PgStore::location(url.expose()).context("invalid database URL")?;
    let database = runtime
        .block_on(PgStore::connect_named(
            url.expose(),
            memlayer_postgres::DEFAULT_POOL_SIZE,
            application_name,
        ))
        .with_context(|| format!("cannot open the store in the {location}"))?;
    let database = match node_id {
        Some(node_id) => database.for_node(node_id),
        None => database,
    };
    Ok((Store::served_by(std::sync::Arc::new(database)), location))
}

/// Flags of `memlayer verify-erasure`.
#[derive(clap::Args)]
struct VerifyArgs {
    #[command(flatten)]
    data: DataArgs,
    /// The text to look for, exactly as it was stored (UTF-8).
    #[arg(long)]
    text: String,
}

fn verify_erasure(args: &VerifyArgs) -> anyhow::Result<()> {
    anyhow::ensure!(!args.text.is_empty(), "--text must not be empty");
    let dir = args.data.data_dir()?;
    let files = [dir.join(STORE_FILE), dir.join(SNAPSHOT_FILE)];
    anyhow::ensure!(
        files[0].is_file(),
        "no store at {}: nothing to verify",
        files[0].display()
    );
    let paths: Vec<&std::path::Path> = files.iter().map(std::path::PathBuf::as_path).collect();
    let found = memlayer_erasure::scan_files(&paths, args.text.as_bytes())
        .context("cannot read the data files")?;
    for occurrence in &found {
        println!(
            "found in {} at byte {}",
            occurrence.file.display(),
            occurrence.offset
        );
    }
    if !found.is_empty() {
        anyhow::bail!("the text occurs {} time(s) in the data files", found.len());
    }
    println!(
        "not found in {}",
        files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(" or ")
    );
    Ok(())
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
    let queued = runtime.block_on(store.feed().reset_embeddings())?;
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
