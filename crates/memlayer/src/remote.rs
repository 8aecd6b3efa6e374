//! Operator commands against a running server, over its HTTP API: `stats`, `purge` and
//! `backup`. They go through the API (not the data directory) because the server holds the
//! store file while it runs, and so that they are authorised and recorded like any request.
//! `stats` and `purge` act in the key's tenant (a `tenant_admin` key); `backup` copies the
//! whole store and needs an `operator` key.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use reqwest::blocking::{Client, RequestBuilder, Response};
use serde_json::Value;

/// Environment variable with the API key these commands send. Deliberately not a flag: a
/// flag's value is visible to every user of the host in the process list.
const KEY_ENV: &str = "MEMLAYER_KEY";
/// What `purge --older-than-days 0` must be confirmed with, as on the admin page.
const DELETE_ALL: &str = "DELETE ALL";

/// Which server to ask, and with which key.
#[derive(Debug, Args)]
pub(crate) struct ServerArgs {
    /// The running server's address.
    #[arg(long, env = "MEMLAYER_URL", default_value = "http://127.0.0.1:7700")]
    url: String,
}

impl ServerArgs {
    fn request(&self, method: reqwest::Method, path: &str) -> anyhow::Result<RequestBuilder> {
        let key = std::env::var(KEY_ENV)
            .ok()
            .filter(|key| !key.is_empty())
            .with_context(|| {
                format!(
                    "set {KEY_ENV} to an API key: a tenant_admin key, or an operator key for \
                     backup"
                )
            })?;
        let client = Client::builder()
            // Backups of large stores take a while; nothing else here is slow.
            .timeout(None)
            .build()?;
        Ok(client
            .request(method, format!("{}{path}", self.url.trim_end_matches('/')))
            .bearer_auth(key))
    }

    /// Sends `request`; an answer other than 2xx becomes an [`ApiFailure`].
    fn send(&self, request: RequestBuilder) -> anyhow::Result<Response> {
        let response = request
            .send()
            .with_context(|| format!("cannot reach the server at {}", self.url))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body: Value = response.json().unwrap_or(Value::Null);
        let text = |field: &str| body["error"][field].as_str().unwrap_or_default().to_owned();
        Err(ApiFailure {
            status,
            code: text("code"),
            message: text("message"),
        }
        .into())
    }

    /// The JSON answer to a request without a body.
    pub(crate) fn json(&self, method: reqwest::Method, path: &str) -> anyhow::Result<Value> {
        let response = self.send(self.request(method, path)?)?;
        response.json().context("the server's answer is not JSON")
    }

    /// The JSON answer to a request with the JSON `body`.
    pub(crate) fn send_json(
        &self,
        method: reqwest::Method,
        path: &str,
        body: &Value,
    ) -> anyhow::Result<Value> {
        let response = self.send(self.request(method, path)?.json(body))?;
        response.json().context("the server's answer is not JSON")
    }
}

/// A request the server refused, with its status and the API's error code and message.
#[derive(Debug)]
pub(crate) struct ApiFailure {
    pub(crate) status: reqwest::StatusCode,
    code: String,
    message: String,
}

impl std::fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the server answered {} {}: {}",
            self.status, self.code, self.message
        )
    }
}

impl std::error::Error for ApiFailure {}

/// Flags of `memlayer stats`.
#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    #[command(flatten)]
    server: ServerArgs,
}

pub(crate) fn stats(args: &StatsArgs) -> anyhow::Result<()> {
    let stats = args
        .server
        .json(reqwest::Method::GET, "/v1/admin/conversations/stats")?;
    println!(
        "project {}: {} conversation(s)",
        stats["project_id"].as_str().unwrap_or("?"),
        stats["total_conversations"]
    );
    if let Some(oldest) = stats["oldest_conversation"].as_object() {
        println!(
            "least recently active: {} (last activity {})",
            oldest["session_id"].as_str().unwrap_or("?"),
            oldest["last_activity"].as_str().unwrap_or("?")
        );
    }
    Ok(())
}

/// Flags of `memlayer purge`.
#[derive(Debug, Args)]
pub(crate) struct PurgeArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Erase every conversation of the key's tenant inactive for more than this many days;
    /// 0 erases all of them and needs --confirm "DELETE ALL".
    #[arg(long)]
    older_than_days: u32,
    /// Must be exactly "DELETE ALL" when --older-than-days is 0.
    #[arg(long)]
    confirm: Option<String>,
}

pub(crate) fn purge(args: &PurgeArgs) -> anyhow::Result<()> {
    if args.older_than_days == 0 {
        anyhow::ensure!(
            args.confirm.as_deref() == Some(DELETE_ALL),
            "--older-than-days 0 erases every conversation: confirm with --confirm {DELETE_ALL:?}"
        );
    }
    let mut receipt = args.server.json(
        reqwest::Method::DELETE,
        &format!(
            "/v1/admin/conversations/purge?older_than_days={}",
            args.older_than_days
        ),
    )?;
    // A purge longer than half the server's request timeout answers 202 and goes on; its
    // receipt comes from the erasure's own URL once it is done.
    if receipt["status"] == "running" {
        let id = &receipt["erasure_id"];
        eprintln!("the purge is still running as erasure {id}; waiting for its receipt");
        let path = format!("/v1/admin/erasures/{id}");
        while receipt["status"] == "running" {
            std::thread::sleep(std::time::Duration::from_secs(1));
            receipt = args.server.json(reqwest::Method::GET, &path)?;
        }
    }
    let counts = &receipt["counts"];
    println!(
        "erased {} conversation(s), {} message(s), {} vector(s) (receipt {})",
        counts["sessions"], counts["messages"], counts["vectors"], receipt["erasure_id"]
    );
    Ok(())
}

/// Flags of `memlayer backup`.
#[derive(Debug, Args)]
pub(crate) struct BackupArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The file to write (must not exist); `memlayer serve --data-dir DIR` serves it once
    /// copied to DIR/memlayer.redb.
    #[arg(long)]
    out: PathBuf,
}

pub(crate) fn backup(args: &BackupArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        !args.out.exists(),
        "{} exists; a backup never overwrites a file",
        args.out.display()
    );
    let mut response = args.server.send(
        args.server
            .request(reqwest::Method::POST, "/v1/admin/backup")?,
    )?;
    let partial = partial_path(&args.out);
    let written = (|| -> anyhow::Result<u64> {
        let mut file = std::fs::File::create_new(&partial)
            .with_context(|| format!("cannot create {}", partial.display()))?;
        let bytes = response
            .copy_to(&mut file)
            .context("the download of the backup failed")?;
        file.flush()?;
        file.sync_all()?;
        Ok(bytes)
    })();
    let bytes = match written {
        Ok(bytes) => bytes,
        Err(err) => {
            let _ = std::fs::remove_file(&partial);
            return Err(err);
        }
    };
    // Checked before it takes the final name: a backup that does not open is no backup.
    let check = memlayer_store::Store::open(&partial)
        .with_context(|| format!("the downloaded backup {} does not open", partial.display()));
    match check {
        Ok(store) => store.shutdown(),
        Err(err) => {
            let _ = std::fs::remove_file(&partial);
            return Err(err);
        }
    }
    // A link, not a rename: a rename would replace a file created at `out` meanwhile.
    std::fs::hard_link(&partial, &args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    std::fs::remove_file(&partial)?;
    println!(
        "backup written to {} ({bytes} bytes, checksums verified)",
        args.out.display()
    );
    Ok(())
}

/// Where a download goes until it is complete and checked.
fn partial_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_owned();
    name.push(".partial");
    out.with_file_name(name)
}
