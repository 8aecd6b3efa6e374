//! Settings of `memlayer serve`: flags and environment variables (through clap), an optional
//! TOML file, and the built-in defaults, merged in that order of precedence.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use memlayer_memory::TokenEncoding;
use memlayer_server::ServerConfig;
use serde::Deserialize;

const DEFAULT_LISTEN: &str = "127.0.0.1:7700";
const DEFAULT_DATA_DIR: &str = "./memlayer-data";

/// Flags of `memlayer serve`. Each has an environment variable; unset ones fall back to the
/// config file, then to the defaults.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on [default: 127.0.0.1:7700]. Port 0 picks a free port.
    #[arg(long, env = "MEMLAYER_LISTEN")]
    listen: Option<SocketAddr>,
    /// Directory holding the store file (memlayer.redb) [default: ./memlayer-data].
    #[arg(long, env = "MEMLAYER_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// TOML file with any of: listen, data_dir, max_body_bytes, token_encoding.
    #[arg(long, env = "MEMLAYER_CONFIG")]
    config: Option<PathBuf>,
    /// Largest request body in bytes [default: 1048576].
    #[arg(long, env = "MEMLAYER_MAX_BODY_BYTES")]
    max_body_bytes: Option<usize>,
    /// Token encoding for messages sent without a count: cl100k_base or o200k_base
    /// [default: cl100k_base].
    #[arg(long, env = "MEMLAYER_TOKEN_ENCODING")]
    token_encoding: Option<String>,
}

/// The config file's shape. Unknown keys are errors, so a typo does not silently fall back
/// to a default.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    max_body_bytes: Option<usize>,
    token_encoding: Option<String>,
}

/// Everything `serve` needs, resolved.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) listen: SocketAddr,
    pub(crate) data_dir: PathBuf,
    pub(crate) server: ServerConfig,
}

impl Settings {
    pub(crate) fn resolve(args: ServeArgs) -> anyhow::Result<Self> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None => FileSettings::default(),
        };
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
        Ok(Self {
            listen: args
                .listen
                .or(file.listen)
                .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("the default address parses")),
            data_dir: args
                .data_dir
                .or(file.data_dir)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR)),
            server: ServerConfig {
                max_body_bytes,
                token_encoding,
            },
        })
    }
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
