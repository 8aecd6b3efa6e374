//! Settings of `memlayer serve`: flags and environment variables (through clap), an optional
//! TOML file, and the built-in defaults, merged in that order of precedence.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use memlayer_embed::Assets;
use memlayer_index::RecallOptions;
use memlayer_llm::{ChatClient, LlmConfig};
use memlayer_memory::TokenEncoding;
use memlayer_server::{DEFAULT_RATE_LIMIT, RateLimit, ServerConfig};
use serde::Deserialize;

const DEFAULT_LISTEN: &str = "127.0.0.1:7700";
const DEFAULT_DATA_DIR: &str = "./memlayer-data";
const ASSETS_DIR_NAME: &str = "memlayer-assets";

/// Where the data lives; shared by every command that opens the store.
#[derive(Debug, Args)]
pub(crate) struct DataArgs {
    /// Directory holding the store file (memlayer.redb) and the vector index snapshot
    /// [default: ./memlayer-data].
    #[arg(long, env = "MEMLAYER_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// TOML file with any of: listen, data_dir, database_url, assets_dir, model_dir, onnxruntime,
    /// max_body_bytes, token_encoding, request_timeout_secs, max_in_flight, max_agent_runs,
    /// header_read_timeout_secs, max_connections, session_idle_timeout_secs, rate_limit_per_second, rate_limit_burst,
    /// disk_warning_free_percent, memory_resident_budget, store_cache_mib, snapshot_interval_secs, admin_key, and
    /// [summarizer] and [agent_model] tables.
    #[arg(long, env = "MEMLAYER_CONFIG")]
    config: Option<PathBuf>,
}

impl DataArgs {
    fn file(&self) -> anyhow::Result<FileSettings> {
        read_optional_file(self.config.as_deref())
    }

    /// The data directory: flag or environment, then the config file, then the default.
    pub(crate) fn data_dir(&self) -> anyhow::Result<PathBuf> {
        let file = self.file()?;
        Ok(resolve_data_dir(self.data_dir.clone(), file.data_dir))
    }

    /// The embedding assets by `assets`' flags or environment, then this config file, then
    /// the default directory: the same precedence as `memlayer serve`.
    pub(crate) fn assets(&self, assets: AssetArgs) -> anyhow::Result<Assets> {
        Ok(assets.resolve(&self.file()?))
    }
}

/// Where the records are: the store file in the data directory, or a PostgreSQL database;
/// for the commands that work on either (`serve`, `keys`).
#[derive(Debug, Args)]
pub(crate) struct StoreArgs {
    #[command(flatten)]
    pub(crate) data: DataArgs,
    /// Keep the records in this PostgreSQL database instead of the store file
    /// (`postgres://user:password@host/db`, or `host=/run/postgresql dbname=memlayer`); the
    /// data directory then holds only the vector index snapshot. Prefer the environment
    /// variable or the config file: a flag's value is visible in the process list.
    #[arg(long, env = "MEMLAYER_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
}

impl StoreArgs {
    /// The database, by flag or environment, then the config file; `None` for the store file.
    pub(crate) fn database_url(&self) -> anyhow::Result<Option<Secret>> {
        Ok(resolve_database_url(
            self.database_url.clone(),
            self.data.file()?.database_url,
        ))
    }
}

fn resolve_database_url(given: Option<String>, from_file: Option<String>) -> Option<Secret> {
    given.or(from_file).map(Secret)
}

fn resolve_data_dir(given: Option<PathBuf>, from_file: Option<PathBuf>) -> PathBuf {
    given
        .or(from_file)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR))
}

/// Flags of `memlayer serve`. Each has an environment variable; unset ones fall back to the
/// config file, then to the defaults.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on [default: 127.0.0.1:7700]. Port 0 picks a free port.
    #[arg(long, env = "MEMLAYER_LISTEN")]
    listen: Option<SocketAddr>,
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    assets: AssetArgs,
    /// Largest request body in bytes [default: 1048576].
    #[arg(long, env = "MEMLAYER_MAX_BODY_BYTES")]
    max_body_bytes: Option<usize>,
    /// Token encoding for messages sent without a count: cl100k_base or o200k_base
    /// [default: cl100k_base].
    #[arg(long, env = "MEMLAYER_TOKEN_ENCODING")]
    token_encoding: Option<String>,
    /// Longest a request may take, in seconds, before it is answered 503 `timeout`
    /// [default: 30].
    #[arg(long, env = "MEMLAYER_REQUEST_TIMEOUT_SECS")]
    request_timeout_secs: Option<u64>,
    /// Most API requests handled at once; one more is answered 503 `overloaded` with
    /// Retry-After, never queued [default: 512].
    #[arg(long, env = "MEMLAYER_MAX_IN_FLIGHT")]
    max_in_flight: Option<usize>,
    /// Most agent runs going on at once (streamed runs and runs past the request timeout
    /// included); one more is answered 503 `overloaded` with Retry-After, nothing stored
    /// [default: 32].
    #[arg(long, env = "MEMLAYER_MAX_AGENT_RUNS")]
    max_agent_runs: Option<usize>,
    /// When less than this percentage of the data directory's file system is free, the log
    /// warns and /readyz says so, before the disk fills up and writes are refused; 0 never
    /// warns [default: 10].
    #[arg(long, env = "MEMLAYER_DISK_WARNING_FREE_PERCENT", value_parser = clap::value_parser!(u8).range(0..=100))]
    disk_warning_free_percent: Option<u8>,
    /// Most long-term memories whose indexes stay in memory, each user counting one more;
    /// past it, the users used least recently leave memory until next needed (about 5 KiB
    /// a memory) [default: 200000].
    #[arg(long, env = "MEMLAYER_MEMORY_RESIDENT_BUDGET")]
    memory_resident_budget: Option<usize>,
    /// Most MiB of the store file's pages kept in the server's memory; pages read less
    /// recently are read again from the operating system's cache when needed. Unused with
    /// a PostgreSQL database [default: 256].
    #[arg(long, env = "MEMLAYER_STORE_CACHE_MIB")]
    store_cache_mib: Option<usize>,
    /// Longest a client may take to send a request's head, and a kept-alive connection may
    /// wait for its next request, in seconds; then the connection is closed [default: 10].
    #[arg(long, env = "MEMLAYER_HEADER_READ_TIMEOUT_SECS")]
    header_read_timeout_secs: Option<u64>,
    /// Most connections open at once; at the cap no more are accepted until one closes
    /// [default: 1024].
    #[arg(long, env = "MEMLAYER_MAX_CONNECTIONS")]
    max_connections: Option<usize>,
    /// A session with no activity for this many seconds is ended (merged into session
    /// memory in the background); 0 never ends one [default: 1800].
    #[arg(long, env = "MEMLAYER_SESSION_IDLE_TIMEOUT_SECS")]
    session_idle_timeout_secs: Option<u64>,
    /// Least time between two saves of the vector index snapshot while the index changes, in
    /// seconds; a start after a crash links into the graph in the background what changed
    /// after the last save [default: 60].
    #[arg(long, env = "MEMLAYER_SNAPSHOT_INTERVAL_SECS")]
    snapshot_interval_secs: Option<u64>,
    /// Requests per second each API key may make on average; one more is answered 429
    /// `rate_limited` with Retry-After. 0 does not limit keys [default: 100].
    #[arg(long, env = "MEMLAYER_RATE_LIMIT_PER_SECOND")]
    rate_limit_per_second: Option<u32>,
    /// Requests a key may make at once after being idle [default: twice the rate, 200].
    #[arg(long, env = "MEMLAYER_RATE_LIMIT_BURST")]
    rate_limit_burst: Option<u32>,
}

/// Where the embedding assets are; shared by every command that embeds text.
#[derive(Debug, Args)]
pub(crate) struct AssetArgs {
    /// Directory with the ONNX Runtime library and the embedding model, as installed by
    /// `cargo xtask setup` or shipped in the release bundle [default: the first of
    /// ./memlayer-assets and memlayer-assets beside or above the executable].
    #[arg(long, env = "MEMLAYER_ASSETS_DIR")]
    assets_dir: Option<PathBuf>,
    /// The embedding model directory, if not the one inside the assets directory.
    #[arg(long, env = "MEMLAYER_MODEL_DIR")]
    model_dir: Option<PathBuf>,
    /// The ONNX Runtime library (libonnxruntime.so, 1.24 or newer), if not the one inside
    /// the assets directory.
    #[arg(long, env = "MEMLAYER_ONNXRUNTIME")]
    onnxruntime: Option<PathBuf>,
}

/// The embedding assets of a command that embeds text without serving: the asset flags,
/// and a config file read for its asset keys only.
#[derive(Debug, Args)]
pub(crate) struct EmbedArgs {
    #[command(flatten)]
    assets: AssetArgs,
    /// TOML file whose assets_dir, model_dir and onnxruntime apply where the flags and
    /// variables are unset (the file `memlayer serve --config` reads; its other keys are
    /// checked but unused here).
    #[arg(long, env = "MEMLAYER_CONFIG")]
    config: Option<PathBuf>,
}

impl EmbedArgs {
    /// Flags or environment, then the config file, then the default directory: the same
    /// precedence as `memlayer serve`.
    pub(crate) fn assets(self) -> anyhow::Result<Assets> {
        let file = read_optional_file(self.config.as_deref())?;
        Ok(self.assets.resolve(&file))
    }
}

impl AssetArgs {
    /// Flags or environment first, then `file`, then the default directory.
    fn resolve(self, file: &FileSettings) -> Assets {
        let root = self
            .assets_dir
            .or_else(|| file.assets_dir.clone())
            .unwrap_or_else(default_assets_dir);
        let standard = Assets::in_dir(root);
        Assets {
            runtime_library: self
                .onnxruntime
                .or_else(|| file.onnxruntime.clone())
                .unwrap_or(standard.runtime_library),
            model_dir: self
                .model_dir
                .or_else(|| file.model_dir.clone())
                .unwrap_or(standard.model_dir),
        }
    }
}

/// The config file's shape. Unknown keys are errors, so a typo does not silently fall back
/// to a default.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    database_url: Option<String>,
    assets_dir: Option<PathBuf>,
    model_dir: Option<PathBuf>,
    onnxruntime: Option<PathBuf>,
    max_body_bytes: Option<usize>,
    token_encoding: Option<String>,
    request_timeout_secs: Option<u64>,
    max_in_flight: Option<usize>,
    max_agent_runs: Option<usize>,
    header_read_timeout_secs: Option<u64>,
    max_connections: Option<usize>,
    session_idle_timeout_secs: Option<u64>,
    rate_limit_per_second: Option<u32>,
    rate_limit_burst: Option<u32>,
    disk_warning_free_percent: Option<u8>,
    memory_resident_budget: Option<usize>,
    store_cache_mib: Option<usize>,
    snapshot_interval_secs: Option<u64>,
    /// The operator's admin key: a `tenant_admin` key of tenant `default`. The environment's
    /// `MEMLAYER_ADMIN_KEY` wins over it.
    admin_key: Option<String>,
    /// `[summarizer]`: an OpenAI-compatible chat endpoint that summarises overflowing
    /// history (base_url, model, api_key, timeout_secs, max_tokens, temperature).
    summarizer: Option<LlmConfig>,
    /// `[agent_model]`: the OpenAI-compatible chat endpoint that answers agent runs
    /// (`POST /v1/agents/{id}/runs`), in the same shape as `[summarizer]`.
    agent_model: Option<LlmConfig>,
}

/// Environment variable with the summariser's API key, so it need not sit in the file.
const SUMMARIZER_KEY_ENV: &str = "MEMLAYER_SUMMARIZER_API_KEY";
/// Environment variable with the agent model's API key, so it need not sit in the file.
const AGENT_MODEL_KEY_ENV: &str = "MEMLAYER_AGENT_MODEL_API_KEY";
/// Environment variable with the operator's admin key. Deliberately not a flag: a flag's
/// value is visible to every user of the host in the process list.
pub(crate) const ADMIN_KEY_ENV: &str = "MEMLAYER_ADMIN_KEY";

/// A secret that `Debug` does not print.
pub(crate) struct Secret(String);

impl Secret {
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Everything `serve` needs, resolved.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) listen: SocketAddr,
    pub(crate) data_dir: PathBuf,
    /// The PostgreSQL database holding the records, if one is configured; else the store
    /// file in `data_dir`.
    pub(crate) database_url: Option<Secret>,
    pub(crate) assets: Assets,
    pub(crate) server: ServerConfig,
    /// Least time between two saves of the vector index snapshot.
    pub(crate) snapshot_interval: Duration,
    /// The store file's page cache, in bytes.
    pub(crate) store_cache_bytes: usize,
    /// The operator's admin key, if configured (see `keys::bootstrap`).
    pub(crate) admin_key: Option<Secret>,
}

impl Settings {
    pub(crate) fn resolve(args: ServeArgs) -> anyhow::Result<Self> {
        let file = args.store.data.file()?;
        // Before any of the file's fields are moved out below.
        let assets = args.assets.resolve(&file);
        let defaults = ServerConfig::default();
        let token_encoding = match args.token_encoding.or(file.token_encoding) {
            Some(name) => name.parse::<TokenEncoding>()?,
            None => defaults.token_encoding,
        };
        let max_body_bytes = args
            .max_body_bytes
            .or(file.max_body_bytes)
            .unwrap_or(defaults.max_body_bytes);
        anyhow::ensure!(max_body_bytes > 0, "max_body_bytes must be positive");
        let request_timeout = args
            .request_timeout_secs
            .or(file.request_timeout_secs)
            .map_or(defaults.request_timeout, Duration::from_secs);
        anyhow::ensure!(
            !request_timeout.is_zero(),
            "request_timeout_secs must be positive"
        );
        let max_in_flight = args
            .max_in_flight
            .or(file.max_in_flight)
            .unwrap_or(defaults.max_in_flight);
        anyhow::ensure!(max_in_flight > 0, "max_in_flight must be positive");
        let max_agent_runs = args
            .max_agent_runs
            .or(file.max_agent_runs)
            .unwrap_or(defaults.max_agent_runs);
        anyhow::ensure!(max_agent_runs > 0, "max_agent_runs must be positive");
        let header_read_timeout = args
            .header_read_timeout_secs
            .or(file.header_read_timeout_secs)
            .map_or(defaults.header_read_timeout, Duration::from_secs);
        anyhow::ensure!(
            !header_read_timeout.is_zero(),
            "header_read_timeout_secs must be positive"
        );
        let max_connections = args
            .max_connections
            .or(file.max_connections)
            .unwrap_or(defaults.max_connections);
        anyhow::ensure!(max_connections > 0, "max_connections must be positive");
        let disk_warning_free_percent = args
            .disk_warning_free_percent
            .or(file.disk_warning_free_percent)
            .unwrap_or(defaults.disk_warning_free_percent);
        anyhow::ensure!(
            disk_warning_free_percent <= 100,
            "disk_warning_free_percent must be at most 100"
        );
        let memory_resident_budget = args
            .memory_resident_budget
            .or(file.memory_resident_budget)
            .unwrap_or(defaults.memory_resident_budget);
        anyhow::ensure!(
            memory_resident_budget > 0,
            "memory_resident_budget must be positive"
        );
        let store_cache_mib = args
            .store_cache_mib
            .or(file.store_cache_mib)
            .unwrap_or(memlayer_store::DEFAULT_CACHE_BYTES >> 20);
        let store_cache_bytes = store_cache_mib
            .checked_mul(1 << 20)
            .filter(|&bytes| bytes > 0)
            .context("store_cache_mib must be positive and fit in memory")?;
        let session_idle_timeout = args
            .session_idle_timeout_secs
            .or(file.session_idle_timeout_secs)
            .map_or(defaults.session_idle_timeout, Duration::from_secs);
        let snapshot_interval = args
            .snapshot_interval_secs
            .or(file.snapshot_interval_secs)
            .map_or(
                RecallOptions::default().snapshot_interval,
                Duration::from_secs,
            );
        anyhow::ensure!(
            !snapshot_interval.is_zero(),
            "snapshot_interval_secs must be positive"
        );
        let rate_limit = rate_limit(
            args.rate_limit_per_second.or(file.rate_limit_per_second),
            args.rate_limit_burst.or(file.rate_limit_burst),
        )?;
        let summarizer_model = chat_client(file.summarizer, "summarizer", SUMMARIZER_KEY_ENV)?;
        let agent_model = chat_client(file.agent_model, "agent_model", AGENT_MODEL_KEY_ENV)?;
        let admin_key = std::env::var(ADMIN_KEY_ENV)
            .ok()
            .filter(|key| !key.is_empty())
            .or(file.admin_key);
        if let Some(key) = &admin_key {
            memlayer_store::validate_configured_key(key)
                .with_context(|| format!("invalid admin key ({ADMIN_KEY_ENV} or admin_key)"))?;
        }
        Ok(Self {
            listen: args
                .listen
                .or(file.listen)
                .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("the default address parses")),
            data_dir: resolve_data_dir(args.store.data.data_dir, file.data_dir),
            database_url: resolve_database_url(args.store.database_url, file.database_url),
            assets,
            server: ServerConfig {
                max_body_bytes,
                token_encoding,
                summarizer_model,
                agent_model,
                request_timeout,
                max_in_flight,
                max_agent_runs,
                session_idle_timeout,
                rate_limit,
                header_read_timeout,
                max_connections,
                disk_warning_free_percent,
                memory_resident_budget,
                // `serve` names the node once it has the data directory.
                node_id: None,
            },
            snapshot_interval,
            store_cache_bytes,
            admin_key: admin_key.map(Secret),
        })
    }
}

/// The client for a model table of the config file (`[table]`), its key taken from the
/// environment variable `key_env` when that is set.
fn chat_client(
    table: Option<LlmConfig>,
    name: &str,
    key_env: &str,
) -> anyhow::Result<Option<ChatClient>> {
    table
        .map(|mut model| {
            if let Ok(key) = std::env::var(key_env) {
                model.api_key = Some(key);
            }
            ChatClient::new(model).with_context(|| format!("invalid [{name}] in the config file"))
        })
        .transpose()
}

/// The per-key rate limit: the default rate unless one is set, none for a rate of 0; the
/// burst defaults to twice the rate, so a client may catch up after a pause without being
/// refused.
fn rate_limit(per_second: Option<u32>, burst: Option<u32>) -> anyhow::Result<Option<RateLimit>> {
    let per_second = per_second.unwrap_or(DEFAULT_RATE_LIMIT.per_second.get());
    let Some(per_second) = NonZeroU32::new(per_second) else {
        anyhow::ensure!(
            burst.is_none(),
            "rate_limit_burst needs a positive rate_limit_per_second"
        );
        return Ok(None);
    };
    let burst = match burst {
        Some(burst) => NonZeroU32::new(burst).context("rate_limit_burst must be positive")?,
        None => per_second.saturating_mul(const { NonZeroU32::new(2).unwrap() }),
    };
    Ok(Some(RateLimit { per_second, burst }))
}

/// `./memlayer-assets` when it exists (a checkout after `cargo xtask setup`), else the one
/// beside or above the executable (the unpacked release bundle: `bin/memlayer` next to
/// `memlayer-assets/`), else `./memlayer-assets` so the error names the usual place.
fn default_assets_dir() -> PathBuf {
    let local = PathBuf::from(ASSETS_DIR_NAME);
    let beside_executable = std::env::current_exe().ok().and_then(|exe| {
        let bin = exe.parent()?.to_owned();
        [
            bin.join(ASSETS_DIR_NAME),
            bin.parent()?.join(ASSETS_DIR_NAME),
        ]
        .into_iter()
        .find(|dir| dir.is_dir())
    });
    if local.is_dir() {
        local
    } else {
        beside_executable.unwrap_or(local)
    }
}

/// The config file's settings, or none when no file is given.
fn read_optional_file(path: Option<&Path>) -> anyhow::Result<FileSettings> {
    path.map_or_else(|| Ok(FileSettings::default()), read_file)
}

fn read_file(path: &Path) -> anyhow::Result<FileSettings> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("invalid config file {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ServeArgs,
    }

    fn resolve(argv: &[&str]) -> anyhow::Result<Settings> {
        Settings::resolve(
            Cli::try_parse_from(std::iter::once("memlayer").chain(argv.iter().copied()))?.args,
        )
    }

    #[test]
    fn defaults_apply_when_nothing_is_given() {
        let settings = resolve(&[]).unwrap();
        assert_eq!(settings.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(settings.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
        assert_eq!(settings.server.max_body_bytes, 1 << 20);
        assert_eq!(settings.server.request_timeout, Duration::from_secs(30));
        assert_eq!(settings.server.max_in_flight, 512);
        assert_eq!(settings.server.max_agent_runs, 32);
        assert_eq!(settings.server.disk_warning_free_percent, 10);
        assert_eq!(
            settings.server.memory_resident_budget,
            memlayer_memory::DEFAULT_RESIDENT_MEMORIES
        );
        assert_eq!(settings.server.header_read_timeout, Duration::from_secs(10));
        assert_eq!(settings.server.max_connections, 1024);
        assert_eq!(
            settings.server.session_idle_timeout,
            Duration::from_secs(30 * 60)
        );
        let limit = settings
            .server
            .rate_limit
            .expect("keys are limited by default");
        assert_eq!((limit.per_second.get(), limit.burst.get()), (100, 200));
        assert_eq!(settings.snapshot_interval, Duration::from_secs(60));
        assert_eq!(settings.store_cache_bytes, 256 << 20);
    }

    #[test]
    fn a_positive_rate_limits_keys_with_a_burst_of_twice_the_rate_unless_given() {
        let limit = |argv: &[&str]| resolve(argv).unwrap().server.rate_limit;
        let doubled = limit(&["--rate-limit-per-second", "50"]).unwrap();
        assert_eq!((doubled.per_second.get(), doubled.burst.get()), (50, 100));
        let given = limit(&["--rate-limit-per-second", "5", "--rate-limit-burst", "7"]).unwrap();
        assert_eq!((given.per_second.get(), given.burst.get()), (5, 7));
        let burst_only = limit(&["--rate-limit-burst", "7"]).unwrap();
        assert_eq!(
            (burst_only.per_second.get(), burst_only.burst.get()),
            (100, 7)
        );
        assert_eq!(
            limit(&["--rate-limit-per-second", "0"]),
            None,
            "0 switches it off"
        );
        assert!(
            resolve(&["--rate-limit-per-second", "0", "--rate-limit-burst", "7"]).is_err(),
            "a burst without a rate"
        );
        assert!(resolve(&["--rate-limit-per-second", "5", "--rate-limit-burst", "0"]).is_err());

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("memlayer.toml");
        std::fs::write(&file, "rate_limit_per_second = 0\n").unwrap();
        let off = resolve(&["--config", file.to_str().unwrap()]).unwrap();
        assert_eq!(off.server.rate_limit, None, "switched off in the file");
    }

    #[test]
    fn the_timeout_and_the_in_flight_limit_come_from_flags_or_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("memlayer.toml");
        std::fs::write(
            &file,
            "request_timeout_secs = 5\nmax_in_flight = 64\nmax_agent_runs = 4\n",
        )
        .unwrap();
        let config = file.to_str().unwrap();
        let settings = resolve(&["--config", config]).unwrap();
        assert_eq!(settings.server.request_timeout, Duration::from_secs(5));
        assert_eq!(settings.server.max_in_flight, 64);
        assert_eq!(settings.server.max_agent_runs, 4);
        let flagged = resolve(&["--config", config, "--max-in-flight", "8"]).unwrap();
        assert_eq!(flagged.server.max_in_flight, 8);
        let flagged = resolve(&["--config", config, "--max-agent-runs", "2"]).unwrap();
        assert_eq!(flagged.server.max_agent_runs, 2);
        assert!(resolve(&["--max-in-flight", "0"]).is_err());
        assert!(resolve(&["--max-agent-runs", "0"]).is_err());
        std::fs::write(
            &file,
            "header_read_timeout_secs = 3\nmax_connections = 100\n",
        )
        .unwrap();
        let settings = resolve(&["--config", config, "--max-connections", "50"]).unwrap();
        assert_eq!(settings.server.header_read_timeout, Duration::from_secs(3));
        assert_eq!(settings.server.max_connections, 50);
        assert!(resolve(&["--max-connections", "0"]).is_err());
        std::fs::write(&file, "memory_resident_budget = 5000\n").unwrap();
        let settings = resolve(&["--config", config]).unwrap();
        assert_eq!(settings.server.memory_resident_budget, 5000);
        let flagged = resolve(&["--config", config, "--memory-resident-budget", "70"]).unwrap();
        assert_eq!(flagged.server.memory_resident_budget, 70);
        assert!(resolve(&["--memory-resident-budget", "0"]).is_err());
        assert!(resolve(&["--header-read-timeout-secs", "0"]).is_err());
        assert!(resolve(&["--request-timeout-secs", "0"]).is_err());
        let idle = resolve(&["--session-idle-timeout-secs", "0"]).unwrap();
        assert!(idle.server.session_idle_timeout.is_zero(), "0 disables it");
        std::fs::write(&file, "snapshot_interval_secs = 5\n").unwrap();
        let settings = resolve(&["--config", config]).unwrap();
        assert_eq!(settings.snapshot_interval, Duration::from_secs(5));
        let flagged = resolve(&["--config", config, "--snapshot-interval-secs", "1"]).unwrap();
        assert_eq!(flagged.snapshot_interval, Duration::from_secs(1));
        assert!(resolve(&["--snapshot-interval-secs", "0"]).is_err());
        std::fs::write(&file, "store_cache_mib = 64\n").unwrap();
        let settings = resolve(&["--config", config]).unwrap();
        assert_eq!(settings.store_cache_bytes, 64 << 20);
        let flagged = resolve(&["--config", config, "--store-cache-mib", "8"]).unwrap();
        assert_eq!(flagged.store_cache_bytes, 8 << 20);
        assert!(resolve(&["--store-cache-mib", "0"]).is_err());
        assert!(resolve(&["--store-cache-mib", &usize::MAX.to_string()]).is_err());
    }

    #[test]
    fn flags_override_the_file_and_the_file_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("memlayer.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:9000\"\ndata_dir = \"/from/file\"\ntoken_encoding = \"o200k_base\"\n",
        )
        .unwrap();
        let config = file.to_str().unwrap();
        let settings = resolve(&["--config", config, "--data-dir", "/from/flag"]).unwrap();
        assert_eq!(settings.listen.to_string(), "127.0.0.1:9000");
        assert_eq!(settings.data_dir, PathBuf::from("/from/flag"));
        assert_eq!(settings.server.token_encoding, TokenEncoding::O200kBase);
        assert!(settings.server.summarizer_model.is_none());
    }

    #[test]
    fn a_database_url_comes_from_the_flag_then_the_file_and_is_never_printed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("memlayer.toml");
        std::fs::write(
            &file,
            "database_url = \"postgres://u:filepw@db/memlayer\"\n",
        )
        .unwrap();
        let config = file.to_str().unwrap();
        let from_file = resolve(&["--config", config]).unwrap();
        let url = from_file.database_url.as_ref().unwrap();
        assert_eq!(url.expose(), "postgres://u:filepw@db/memlayer");
        assert!(!format!("{from_file:?}").contains("filepw"));
        let flagged = resolve(&["--config", config, "--database-url", "host=/tmp dbname=x"]);
        assert_eq!(
            flagged.unwrap().database_url.unwrap().expose(),
            "host=/tmp dbname=x"
        );
        assert!(
            resolve(&[]).unwrap().database_url.is_none(),
            "the file by default"
        );
    }

    #[test]
    fn a_summarizer_table_configures_the_model() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("memlayer.toml");
        std::fs::write(
            &file,
            "[summarizer]\nbase_url = \"http://127.0.0.1:8080/v1\"\nmodel = \"llama-3.1-8b\"\ntimeout_secs = 20\n",
        )
        .unwrap();
        let settings = resolve(&["--config", file.to_str().unwrap()]).unwrap();
        let model = settings.server.summarizer_model.expect("configured");
        assert_eq!(model.config().model, "llama-3.1-8b");
        assert_eq!(model.config().timeout, std::time::Duration::from_secs(20));

        std::fs::write(
            &file,
            "[summarizer]\nbase_url = \"not a url\"\nmodel = \"m\"\n",
        )
        .unwrap();
        let err = resolve(&["--config", file.to_str().unwrap()]).unwrap_err();
        assert!(format!("{err:#}").contains("[summarizer]"), "{err:#}");
    }

    #[test]
    fn an_agent_model_table_configures_runs() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("memlayer.toml");
        let config = file.to_str().unwrap();
        std::fs::write(
            &file,
            "[agent_model]\nbase_url = \"http://127.0.0.1:8080/v1\"\nmodel = \"qwen2.5-7b\"\n",
        )
        .unwrap();
        let settings = resolve(&["--config", config]).unwrap();
        assert_eq!(
            settings
                .server
                .agent_model
                .expect("configured")
                .config()
                .model,
            "qwen2.5-7b"
        );
        assert!(settings.server.summarizer_model.is_none());

        std::fs::write(
            &file,
            "[agent_model]\nbase_url = \"ftp://host\"\nmodel = \"m\"\n",
        )
        .unwrap();
        let err = resolve(&["--config", config]).unwrap_err();
        assert!(format!("{err:#}").contains("[agent_model]"), "{err:#}");
    }

    #[test]
    fn commands_that_only_embed_resolve_assets_like_serve() {
        #[derive(Parser)]
        struct EmbedCli {
            #[command(flatten)]
            args: EmbedArgs,
        }
        let assets = |argv: &[&str]| {
            EmbedCli::try_parse_from(std::iter::once("memlayer").chain(argv.iter().copied()))
                .unwrap()
                .args
                .assets()
        };
        // `.cargo/config.toml` sets MEMLAYER_ASSETS_DIR for every test, and the environment
        // rightly beats the file, so the file's part is checked on the other two keys.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("memlayer.toml");
        std::fs::write(&file, "model_dir = \"/model\"\nonnxruntime = \"/ort.so\"\n").unwrap();
        let config = file.to_str().unwrap();

        let from_file = assets(&["--config", config]).unwrap();
        assert_eq!(from_file.model_dir, PathBuf::from("/model"));
        assert_eq!(from_file.runtime_library, PathBuf::from("/ort.so"));
        let flagged = assets(&["--config", config, "--model-dir", "/flag"]).unwrap();
        assert_eq!(flagged.model_dir, PathBuf::from("/flag"));
        let standard = assets(&["--assets-dir", "/assets"]).unwrap();
        assert_eq!(standard, Assets::in_dir("/assets"));
        assert!(assets(&["--config", "/does/not/exist.toml"]).is_err());
    }

    #[test]
    fn the_admin_key_comes_from_the_file_is_checked_and_never_printed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("memlayer.toml");
        let key = "0123456789abcdef0123456789abcdef-from-file";
        std::fs::write(&file, format!("admin_key = {key:?}\n")).unwrap();
        let settings = resolve(&["--config", file.to_str().unwrap()]).unwrap();
        assert_eq!(settings.admin_key.as_ref().map(Secret::expose), Some(key));
        assert!(!format!("{settings:?}").contains(key));

        std::fs::write(&file, "admin_key = \"short\"\n").unwrap();
        let err = resolve(&["--config", file.to_str().unwrap()]).unwrap_err();
        assert!(format!("{err:#}").contains("admin key"), "{err:#}");
        assert!(resolve(&[]).unwrap().admin_key.is_none());
    }

    #[test]
    fn config_mistakes_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("memlayer.toml");
        std::fs::write(&file, "listne = \"127.0.0.1:9000\"\n").unwrap();
        let err = resolve(&["--config", file.to_str().unwrap()]).unwrap_err();
        assert!(
            format!("{err:#}").contains("unknown field `listne`"),
            "{err:#}"
        );
        assert!(resolve(&["--config", "/does/not/exist.toml"]).is_err());
        assert!(resolve(&["--token-encoding", "gpt2"]).is_err());
        assert!(resolve(&["--max-body-bytes", "0"]).is_err());
    }
}
